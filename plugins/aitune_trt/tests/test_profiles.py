"""Optimization profiles from the recorded shapes: the three sources, every config error, selection, JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

import aitune_core as ait
from aitune_core.plugin_api import BuildContext
from aitune_trt import OutOfProfileError, ProfileError, ProfileInput, ShapeRange, TensorRTProfile
from aitune_trt.profiles import (
    ProfileSelector,
    config_profiles,
    graph_profile,
    input_names,
    profiles_from_json,
    profiles_to_json,
    resolve_profiles,
    sample_profiles,
)

# tagger: tokens [batch, seq, 8] and mask [batch, seq], recorded at (2, 3), (4, 9), (8, 5).
TOKENS_RANGE = ShapeRange([2, 3, 8], [8, 6, 8], [8, 9, 8])
MASK_RANGE = ShapeRange([2, 3], [8, 6], [8, 9])


def test_graph_profile_is_the_recorded_min_opt_max(tagger_context: BuildContext) -> None:
    profile = graph_profile(tagger_context.graph_spec)
    assert profile.source == "graph"
    assert profile.inputs == (
        ProfileInput("tokens", "tokens", (2, 3, 8), (8, 6, 8), (8, 9, 8)),
        ProfileInput("mask", "mask", (2, 3), (8, 6), (8, 9)),
    )
    assert profile.describe() == "graph: tokens=[2, 3, 8]..[8, 6, 8]..[8, 9, 8], mask=[2, 3]..[8, 6]..[8, 9]"


def test_graph_profile_takes_a_declared_range(tagger_context: BuildContext) -> None:
    """Declared dims widen the profile beyond the recorded sizes, with the declared opt."""
    from aitune_core.testing.engine import DynamicShapes, declared_graph

    shapes = DynamicShapes.parse(
        {"tokens": {0: ait.BatchDim(max=32, opt=16), 1: ait.DynamicDim("seq", min=1, max=512, opt=128)}}
    )
    assert shapes is not None
    graph = declared_graph(tagger_context.graph_spec, shapes, [])
    profile = graph_profile(graph)
    assert profile.inputs == (
        ProfileInput("tokens", "tokens", (1, 1, 8), (16, 128, 8), (32, 512, 8)),
        ProfileInput("mask", "mask", (1, 1), (16, 128), (32, 512)),
    )


def test_names_are_the_onnx_names_of_nested_access_paths(nested_context: BuildContext) -> None:
    assert input_names(nested_context.graph_spec) == {"values[0]": "values_0", 'values[1]["pairs"]': "values_1_pairs"}
    profile = graph_profile(nested_context.graph_spec)
    assert profile.names == {"values[0]": "values_0", 'values[1]["pairs"]': "values_1_pairs"}
    assert profile.entry("values_1_pairs").max == (16, 3)  # two rows per sample, batch up to 8


def test_one_fixed_profile_per_distinct_sample_shape(tagger_context: BuildContext) -> None:
    profiles = sample_profiles(tagger_context.graph_spec, tagger_context.samples, limit=8)
    assert [p.source for p in profiles] == ["sample"] * 3
    assert [p.entry("tokens").min for p in profiles] == [(2, 3, 8), (4, 9, 8), (8, 5, 8)]
    assert all(entry.min == entry.opt == entry.max for p in profiles for entry in p.inputs)


def test_repeated_sample_shapes_give_one_profile(tagger_context: BuildContext) -> None:
    samples = [tagger_context.samples[0], tagger_context.samples[0], tagger_context.samples[1]]
    assert len(sample_profiles(tagger_context.graph_spec, samples, limit=8)) == 2


def test_too_many_sample_shapes(tagger_context: BuildContext) -> None:
    with pytest.raises(ProfileError, match="3 distinct recorded shapes, more than max_sample_profiles=2"):
        sample_profiles(tagger_context.graph_spec, tagger_context.samples, limit=2)


def test_config_profiles_accept_triples_and_dicts(tagger_context: BuildContext) -> None:
    given: list[dict[str, Any]] = [
        {"tokens": ([2, 3, 8], [2, 3, 8], [4, 9, 8]), "mask": {"min": [2, 3], "opt": [2, 3], "max": [4, 9]}},
        {"tokens": TOKENS_RANGE, "mask": MASK_RANGE},
    ]
    profiles = config_profiles(tagger_context.graph_spec, [{k: ShapeRange.of(v) for k, v in p.items()} for p in given])
    assert [p.source for p in profiles] == ["config", "config"]
    assert profiles[0].entry("mask") == ProfileInput("mask", "mask", (2, 3), (2, 3), (4, 9))
    assert profiles[1].same_shapes(graph_profile(tagger_context.graph_spec))


def test_config_ranges_may_go_beyond_the_recorded_range(tagger_context: BuildContext) -> None:
    (profile,) = config_profiles(
        tagger_context.graph_spec,
        [{"tokens": ShapeRange([1, 1, 8], [8, 64, 8], [32, 512, 8]), "mask": ShapeRange([1, 1], [8, 64], [32, 512])}],
    )
    assert profile.entry("tokens").max == (32, 512, 8)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (
            {"tokens": TOKENS_RANGE, "mask": MASK_RANGE, "labels": MASK_RANGE},
            "profile 0: unknown input path `labels`; the recorded inputs are `tokens`, `mask`",
        ),
        ({"tokens": TOKENS_RANGE}, "profile 0: no shapes for recorded input `mask`"),
        (
            {"tokens": ShapeRange([2, 3], [8, 6], [8, 9]), "mask": MASK_RANGE},
            r"profile 0, `tokens`: min shape \[2, 3\] has rank 2, but the input was recorded with rank 3",
        ),
        (
            {"tokens": ShapeRange([2, 3, 8], [8, 6, 8], [8, 9, 8, 1]), "mask": MASK_RANGE},
            r"profile 0, `tokens`: max shape \[8, 9, 8, 1\] has rank 4",
        ),
        (
            {"tokens": TOKENS_RANGE, "mask": ShapeRange([2, 3], [8, 10], [8, 9])},
            "profile 0, `mask`: axis 1 needs min <= opt <= max, got 3, 10, 9",
        ),
        (
            {"tokens": ShapeRange([4, 3, 8], [2, 6, 8], [8, 9, 8]), "mask": MASK_RANGE},
            "profile 0, `tokens`: axis 0 needs min <= opt <= max, got 4, 2, 8",
        ),
        (
            {"tokens": ShapeRange([2, 3, 8], [8, 6, 16], [8, 9, 16]), "mask": MASK_RANGE},
            "profile 0, `tokens`: axis 2 is static, always 8 in the recorded calls, but the profile gives 8, 16, 16",
        ),
        (
            {"tokens": ShapeRange([-1, 3, 8], [8, 6, 8], [8, 9, 8]), "mask": MASK_RANGE},
            r"profile 0, `tokens`: min shape \[-1, 3, 8\] has a negative size on axis 0",
        ),
    ],
    ids=["unknown-path", "missing-path", "wrong-rank", "wrong-rank-max", "opt-above-max", "min-above-opt",
         "static-axis", "negative"],
)  # fmt: skip
def test_config_profile_errors(tagger_context: BuildContext, profile: dict[str, ShapeRange], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        config_profiles(tagger_context.graph_spec, [profile])


def test_the_error_names_the_profile_it_is_in(tagger_context: BuildContext) -> None:
    good = {"tokens": TOKENS_RANGE, "mask": MASK_RANGE}
    with pytest.raises(ProfileError, match=r"^profile 1: no shapes for recorded input `tokens`"):
        config_profiles(tagger_context.graph_spec, [good, {"mask": MASK_RANGE}])


def test_an_onnx_name_used_as_a_key_gets_a_hint(nested_context: BuildContext) -> None:
    with pytest.raises(ProfileError) as raised:
        config_profiles(nested_context.graph_spec, [{"values_0": ShapeRange([2, 8], [8, 8], [8, 8])}])
    assert "unknown input path `values_0` (the ONNX name of `values[0]`; profiles are keyed by access path)" in str(
        raised.value
    )
    assert 'the recorded inputs are `values[0]`, `values[1]["pairs"]`' in str(raised.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([[1], [2]], "a shape range is"),
        ({"min": [1], "max": [2]}, "exactly the keys min, opt and max"),
        (([1.5], [2], [3]), "whole numbers"),
        (("abc", [2], [3]), "whole numbers"),
    ],
)
def test_malformed_shape_ranges(value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        ShapeRange.of(value)


def test_resolve_adds_the_graph_profile_after_the_others(tagger_context: BuildContext) -> None:
    graph, samples = tagger_context.graph_spec, tagger_context.samples
    assert [p.source for p in resolve_profiles("graph", graph, samples)] == ["graph"]
    assert [p.source for p in resolve_profiles("samples", graph, samples)] == ["sample"] * 3 + ["graph"]
    assert [p.source for p in resolve_profiles("samples", graph, samples, cover_tuned_range=False)] == ["sample"] * 3
    given = [{"tokens": ShapeRange([2, 3, 8], [2, 3, 8], [4, 9, 8]), "mask": ShapeRange([2, 3], [2, 3], [4, 9])}]
    assert [p.source for p in resolve_profiles("config", graph, samples, given)] == ["config", "graph"]


def test_resolve_drops_profiles_with_the_same_shapes(mlp_context: BuildContext) -> None:
    given = [{"x": ShapeRange([2, 8], [8, 8], [8, 8])}, {"x": ShapeRange([2, 8], [8, 8], [8, 8])}]
    profiles = resolve_profiles("config", mlp_context.graph_spec, mlp_context.samples, given)
    assert [p.source for p in profiles] == ["config"]  # the second and the graph's own are the same


def test_resolve_refuses_what_it_cannot_use(mlp_context: BuildContext) -> None:
    with pytest.raises(ProfileError, match="needs at least one profile"):
        resolve_profiles("config", mlp_context.graph_spec, mlp_context.samples)
    with pytest.raises(ProfileError, match="profile_source must be one of graph, samples, config"):
        resolve_profiles("everything", mlp_context.graph_spec, mlp_context.samples)


# ---------------------------------------------------------------------- selection
def _profile(source: str, low: int, opt: int, high: int) -> TensorRTProfile:
    return TensorRTProfile(
        (
            ProfileInput("tokens", "tokens", (low, 3, 8), (opt, 6, 8), (high, 9, 8)),
            ProfileInput("mask", "mask", (low, 3), (opt, 6), (high, 9)),
        ),
        source,
    )


def test_a_call_takes_the_first_profile_that_contains_it() -> None:
    selector = ProfileSelector([_profile("config", 1, 2, 4), _profile("config", 3, 8, 8)], ["tokens", "mask"])
    assert selector.select([(1, 5, 8), (1, 5)]) == 0
    assert selector.select([(4, 9, 8), (4, 9)]) == 0  # in both: the first wins
    assert selector.select([(5, 3, 8), (5, 3)]) == 1


def test_every_input_must_fit_the_same_profile() -> None:
    selector = ProfileSelector([_profile("config", 1, 2, 4), _profile("config", 5, 8, 8)], ["tokens", "mask"])
    with pytest.raises(OutOfProfileError) as raised:
        selector.select([(2, 5, 8), (6, 5)])  # tokens fits profile 0 only, mask profile 1 only
    message = str(raised.value)
    assert "(tokens=[2, 5, 8], mask=[6, 5])" in message
    assert "profile 0 (config) takes mask=[1, 3]..[2, 6]..[4, 9]" in message
    assert "profile 1 (config) takes tokens=[5, 3, 8]..[8, 6, 8]..[8, 9, 8]" in message


def test_static_axes_and_rank_are_checked() -> None:
    selector = ProfileSelector([_profile("graph", 1, 4, 8)], ["tokens", "mask"])
    with pytest.raises(OutOfProfileError):
        selector.select([(2, 5, 16), (2, 5)])
    with pytest.raises(OutOfProfileError):
        selector.select([(2, 5), (2, 5)])


def test_selection_follows_the_layout_order_of_inputs() -> None:
    selector = ProfileSelector([_profile("config", 1, 2, 4), _profile("config", 5, 8, 8)], ["mask", "tokens"])
    assert selector.select([(6, 5), (6, 5, 8)]) == 1


def test_a_selector_needs_shapes_for_every_input() -> None:
    with pytest.raises(ValueError, match="profile 0 has no shapes for input labels"):
        ProfileSelector([_profile("graph", 1, 4, 8)], ["tokens", "mask", "labels"])
    with pytest.raises(ValueError, match="at least one optimization profile"):
        ProfileSelector([], ["tokens"])


# ---------------------------------------------------------------------- JSON
def test_profiles_round_trip_through_json(tagger_context: BuildContext) -> None:
    profiles = resolve_profiles("samples", tagger_context.graph_spec, tagger_context.samples)
    text = profiles_to_json(profiles)
    payload = json.loads(text)
    assert payload["format"] == 1
    assert payload["profiles"][0] == {
        "inputs": [
            {"path": "tokens", "name": "tokens", "min": [2, 3, 8], "opt": [2, 3, 8], "max": [2, 3, 8]},
            {"path": "mask", "name": "mask", "min": [2, 3], "opt": [2, 3], "max": [2, 3]},
        ],
        "source": "sample",
    }
    assert profiles_from_json(text) == profiles


def test_profiles_json_of_another_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format 2; this aitune-trt reads format 1"):
        profiles_from_json(json.dumps({"format": 2, "profiles": []}))


def test_renamed_takes_the_exported_names() -> None:
    profile = _profile("graph", 1, 4, 8).renamed({"tokens": "tokens_2"})
    assert [entry.name for entry in profile.inputs] == ["tokens_2", "mask"]
