"""Declared shapes: a module recorded at sequence lengths 16 to 64 and declared 1 to 512.

The backend is a real one that runs its own copy of the module and notes the input
shapes it gets, so the tests see where calls go: to the backend (routed) or to the
original module (fallback).
"""

from __future__ import annotations

import copy
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import torch

import aitune_core as ait
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.graphs.declared_graph import declared_graph
from aitune_core.log import capture
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_core.testing.timing import FAST_PROFILE
from aitune_core.validation.points import validation_points

SEQ = ait.DynamicDim("seq", min=1, max=512, opt=128)


@attrs.frozen
class CopyConfig(BackendConfig):
    pass


class CopyBackend(Backend):
    """Runs a copy of the module; every input shape it is called with is noted."""

    name = "test_copy"
    config_class = CopyConfig
    seen: ClassVar[list[tuple[int, ...]]] = []

    def _build(self, context: BuildContext) -> None:
        self.copy = copy.deepcopy(context.module)

    def _activate(self) -> None:
        pass

    def _deactivate(self) -> None:
        pass

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CopyBackend.seen.append(tuple(kwargs["input_ids"].shape if "input_ids" in kwargs else args[0].shape))
        return self.copy(*args, **kwargs)


def recorded_lengths() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    return [encoder_call(2, length) for length in (16, 32, 64)]


def tune_encoder(name: str, dynamic_shapes: dict[Any, Any] | None) -> tuple[TinyEncoder, ait.Module]:
    model = TinyEncoder().eval()
    module = ait.Module(model, name, dynamic_shapes=dynamic_shapes)
    strategy = ait.FirstWinsStrategy([CopyBackend()], profile=FAST_PROFILE)
    ait.tune(module, [kwargs for _, kwargs in recorded_lengths()], strategy=strategy)
    return model, module


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    CopyBackend.seen.clear()


def test_declared_sequence_range_is_routed_and_validated(unique_name: Callable[[str], str]) -> None:
    model, module = tune_encoder(unique_name("enc"), {"input_ids": {1: SEQ}})
    # Validation called the backend at the declared min and max lengths, not only the recorded ones.
    lengths = {shape[1] for shape in CopyBackend.seen}
    assert {1, 128, 512} <= lengths, lengths
    ait.config.fallback = "raise"  # a call that is not routed raises instead of running eagerly
    for length in (8, 300, 512):
        _, kwargs = encoder_call(2, length)
        CopyBackend.seen.clear()
        with torch.no_grad():
            got = module(**kwargs)
            expected = model(**kwargs)
        assert CopyBackend.seen == [(2, length)]
        torch.testing.assert_close(got, expected)
    _, too_long = encoder_call(2, 513)
    with pytest.raises(ait.UnsupportedCallError, match=r"outside the tuned range"):
        module(**too_long)


def test_attention_mask_follows_the_declared_length(unique_name: Callable[[str], str]) -> None:
    """Only input_ids is declared; the mask, always as long, takes the same range."""
    _, module = tune_encoder(unique_name("enc"), {"input_ids": {1: SEQ}})
    (route,) = module.routes.values()
    declared = {(r.path, r.axis): r for r in route.graph.declared}
    assert declared[("input_ids", 1)].follows is False
    assert declared[("attention_mask", 1)].follows is True
    assert route.graph.input_spec.spec(route.graph.input_spec.locators[1]).max_shape == [2, 512]


def test_outside_declared_range_falls_back_with_one_warning(unique_name: Callable[[str], str]) -> None:
    model, module = tune_encoder(unique_name("enc"), {"input_ids": {1: SEQ}})
    _, kwargs = encoder_call(2, 513)
    CopyBackend.seen.clear()
    with capture() as events, torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(module(**kwargs), model(**kwargs))
    assert CopyBackend.seen == []
    warnings = [e for e in events if e["event"] == "falling back to eager"]
    assert len(warnings) == 1
    assert "`input_ids` has shape [2, 513], outside the tuned range [2, 1]..[2, 512]" in warnings[0]["reason"]


def test_batch_dim_bounds_every_batch_axis(unique_name: Callable[[str], str]) -> None:
    """One BatchDim on input_ids: the mask's batch axis takes it too, and no search goes past it."""
    model = TinyEncoder().eval()
    module = ait.Module(model, unique_name("enc"), dynamic_shapes={"input_ids": {0: ait.BatchDim(max=16)}})
    data = [encoder_call(batch, 16)[1] for batch in (2, 4)]
    ait.tune(module, data, strategy=ait.FirstWinsStrategy([CopyBackend()], profile=FAST_PROFILE))
    (route,) = module.routes.values()
    assert route.graph.batch_range == (1, 16)
    ait.config.fallback = "raise"
    for batch in (1, 16):
        module(**encoder_call(batch, 16)[1])
    with pytest.raises(ait.UnsupportedCallError):
        module(**encoder_call(17, 16)[1])


def test_unknown_declared_path_names_the_recorded_ones(unique_name: Callable[[str], str]) -> None:
    with pytest.raises(ait.DeclarationError, match=r"input_idz.*input_ids, attention_mask|attention_mask, input_ids"):
        tune_encoder(unique_name("enc"), {"input_idz": {1: SEQ}})


def test_recorded_call_outside_the_declaration_names_sample_and_axis(unique_name: Callable[[str], str]) -> None:
    narrow = ait.DynamicDim("seq", min=1, max=32)
    with pytest.raises(ait.DeclarationError, match=r"`input_ids` axis 1 has size 64 in recorded sample 2"):
        tune_encoder(unique_name("enc"), {"input_ids": {1: narrow}})


def test_a_failed_declaration_leaves_the_module_recording(unique_name: Callable[[str], str]) -> None:
    model = TinyEncoder().eval()
    module = ait.Module(model, unique_name("enc"), dynamic_shapes={"nope": {1: SEQ}})
    with pytest.raises(ait.DeclarationError):
        ait.tune(module, [encoder_call(2, 16)[1]], strategy=ait.FirstWinsStrategy([CopyBackend()]))
    assert module.state is ait.ModuleState.RECORDING
    assert module.routes == {}


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"input_ids": {1: 512}}, r"must be a DynamicDim or BatchDim"),
        ({"input_ids": {-1: SEQ}}, r"non-negative ints"),
        ({3: {1: SEQ}}, r"parameter paths"),
        ({"input_ids": {}}, r"non-empty dict"),
        (
            {"input_ids": {1: SEQ}, "attention_mask": {1: ait.DynamicDim("seq", min=1, max=256)}},
            r"dim `seq` is declared twice with different ranges",
        ),
        ([("input_ids", 1)], r"must be a dict"),
    ],
)
def test_bad_declarations_are_refused_when_wrapping(
    unique_name: Callable[[str], str], declaration: Any, message: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        ait.Module(TinyEncoder(), unique_name("enc"), dynamic_shapes=declaration)


def test_dim_ranges_are_checked() -> None:
    with pytest.raises(ValueError, match="0 < min <= opt <= max"):
        ait.DynamicDim("seq", min=0, max=8)
    with pytest.raises(ValueError, match="0 < min <= opt <= max"):
        ait.DynamicDim("seq", min=4, max=8, opt=9)
    with pytest.raises(ValueError, match="BatchDim"):
        ait.BatchDim(min=1)
    with pytest.raises(ValueError, match="not 'batch'"):
        ait.DynamicDim("batch", min=1, max=8)
    assert ait.BatchDim(max=8).opt == 8
    assert ait.DynamicDim("seq", min=2, max=10).opt == 6


def test_nested_paths_by_tuple_and_by_display_path(unique_name: Callable[[str], str]) -> None:
    class Opts(torch.nn.Module):
        def forward(self, x: torch.Tensor, opts: dict[str, torch.Tensor]) -> torch.Tensor:
            return x * opts["mask"].unsqueeze(-1)

    for key in (("opts", "mask"), 'opts["mask"]'):
        module = ait.Module(Opts().eval(), unique_name("opts"), dynamic_shapes={"x": {1: SEQ}, key: {1: SEQ}})
        data = [(torch.randn(2, n, 4), {"mask": torch.ones(2, n)}) for n in (3, 5)]
        ait.tune(module, data, strategy=ait.FirstWinsStrategy([CopyBackend()], profile=FAST_PROFILE))
        (route,) = module.routes.values()
        assert {(r.path, r.axis, r.follows) for r in route.graph.declared} == {
            ("x", 1, False),
            ('opts["mask"]', 1, False),
        }


def test_validation_points_reach_the_declared_extremes() -> None:
    module = ait.Module(TinyEncoder(), "points-enc", dynamic_shapes={"input_ids": {1: SEQ}})
    for _, kwargs in recorded_lengths():
        module(**kwargs)
    (record,) = module.graphs.values()
    graph = declared_graph(record.spec, module.dynamic_shapes, record.samples)
    shapes = {
        point.label.split(",")[0]: tuple(point.calls[0]["input_ids"].shape)
        for point in validation_points(graph, record.samples)
    }
    assert shapes["min shape"] == (2, 1)
    assert shapes["opt shape"] == (2, 128)
    assert shapes["max shape"] == (2, 512)
    # The recorded spec is untouched: a later declaration starts from what was recorded.
    assert record.spec.input_spec.spec(record.spec.input_spec.locators[0]).max_shape == [2, 64]


def test_checkpoint_keeps_the_declaration(unique_name: Callable[[str], str], tmp_path: Path) -> None:
    model = TinyEncoder().eval()
    name = unique_name("enc")
    module = ait.Module(model, name, dynamic_shapes={"input_ids": {1: SEQ}})
    strategy = ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(module, [kw for _, kw in recorded_lengths()], strategy=strategy)
    ait.save(module, tmp_path / "ckpt")
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    (graph,) = manifest["modules"][0]["graphs"]
    assert {(d["path"], d["axis"], d["min"], d["opt"], d["max"]) for d in graph["spec"]["declared"]} == {
        ("input_ids", 1, 1, 128, 512),
        ("attention_mask", 1, 1, 128, 512),
    }

    del module, strategy
    gc.collect()  # frees the name for the fresh wrapper
    fresh = ait.Module(TinyEncoder().eval(), name)  # no declaration: the checkpoint brings it
    ait.load(fresh, tmp_path / "ckpt")
    ait.config.fallback = "raise"
    _, kwargs = encoder_call(2, 300)
    with torch.no_grad():
        torch.testing.assert_close(fresh(**kwargs), model(**kwargs))

    from aitune_core.checkpoint.inspect import describe_checkpoint

    text = describe_checkpoint(tmp_path / "ckpt")
    assert "declared: input_ids[1]: seq in [1, 512], opt 128" in text
    assert "attention_mask[1]: seq in [1, 512], opt 128 (follows the recorded sizes)" in text


def test_a_checkpoint_with_an_opt_outside_its_range_is_refused(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    model = TinyEncoder().eval()
    name = unique_name("enc")
    module = ait.Module(model, name, dynamic_shapes={"input_ids": {1: SEQ}})
    ait.tune(module, [kw for _, kw in recorded_lengths()], strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()]))
    ait.save(module, tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "manifest.json"
    manifest = json.loads(path.read_text())
    tensor = manifest["modules"][0]["graphs"][0]["spec"]["input_spec"]["tensors"][0]
    assert tensor["opt"] == [None, 128]
    tensor["opt"] = [None, 9999]
    path.write_text(json.dumps(manifest))
    del module
    gc.collect()
    fresh = ait.Module(TinyEncoder().eval(), name)
    with pytest.raises(ait.CheckpointError, match=r"opt sizes \[None, 9999\] do not fit"):
        ait.load(fresh, tmp_path / "ckpt")
    assert fresh.state is ait.ModuleState.RECORDING
