"""SampleMetadata: capture, learning shapes, make_batch, make_shape and describe."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import torch

from aitune_core import InfoLevel, SampleMetadata

Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass(frozen=True)
class Encoded:
    ids: torch.Tensor
    lang: str


def learned(*samples: tuple[dict[str, Any], int | None], strict: bool = False) -> SampleMetadata:
    """Metadata widened with every ``(inputs, batch_size)`` sample, in order."""
    (first, first_bs), *rest = samples
    meta = SampleMetadata.from_inputs(first, strict=strict, batch_size=first_bs)
    for inputs, batch_size in rest:
        meta.update_shapes_seen(SampleMetadata.from_inputs(inputs, strict=strict, batch_size=batch_size))
    return meta


def shapes(meta: SampleMetadata) -> dict[str, list[int | str]]:
    return {loc.display_path: spec.shape for loc, spec in meta.tensor_data}


# ---------------------------------------------------------------------- capture


def test_from_inputs_requires_a_dict_keyed_by_parameter_name() -> None:
    with pytest.raises(TypeError, match=r"ForwardSignature\.normalize"):
        SampleMetadata.from_inputs((torch.ones(1),))  # type: ignore[arg-type]


def test_non_strict_keeps_only_tensors_strict_keeps_everything() -> None:
    inputs = {"x": torch.ones(2, 3), "mode": "eval", "steps": 3, "nested": (0.5, torch.ones(1))}
    loose = SampleMetadata.from_inputs(inputs)
    assert [loc.display_path for loc, _ in loose.tensor_data] == ["x", "nested[1]"]
    assert loose.other_data == []
    strict = SampleMetadata.from_inputs(inputs, strict=True)
    assert [loc.display_path for loc, _ in strict.tensor_data] == ["x", "nested[1]"]
    assert [(loc.display_path, value) for loc, value in strict.other_data] == [
        ("mode", "eval"),
        ("steps", 3),
        ("nested[0]", 0.5),
    ]


def test_dtype_is_recorded_per_tensor() -> None:
    meta = SampleMetadata.from_inputs({"ids": torch.zeros(2, dtype=torch.int64), "w": torch.zeros(2).half()})
    assert [spec.dtype for _, spec in meta.tensor_data] == [torch.int64, torch.float16]


def test_batch_size_must_be_a_positive_int_or_none() -> None:
    for bad in (0, -1, 1.0, True, "2"):
        with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1"):
            SampleMetadata.from_inputs({"x": torch.ones(1)}, batch_size=bad)  # type: ignore[arg-type]


def test_spec_lookup_by_locator() -> None:
    meta = SampleMetadata.from_inputs({"a": torch.ones(1), "b": [torch.ones(2, 2)]})
    loc_b = meta.locators[1]
    assert loc_b.display_path == "b[0]"
    assert meta.spec(loc_b).max_shape == [2, 2]


# ---------------------------------------------------------------------- learning shapes


def test_update_learns_batch_dynamic_and_static_axes() -> None:
    meta = learned(
        ({"ids": torch.zeros(1, 10, 4), "stacked": torch.zeros(2, 3), "table": torch.zeros(7)}, 1),
        ({"ids": torch.zeros(2, 15, 4), "stacked": torch.zeros(4, 3), "table": torch.zeros(7)}, 2),
        ({"ids": torch.zeros(4, 12, 4), "stacked": torch.zeros(8, 3), "table": torch.zeros(7)}, 4),
    )
    assert shapes(meta) == {"ids": ["batch0", "dim1", 4], "stacked": ["batch0", 3], "table": [7]}
    ids = meta.spec(meta.locators[0])
    assert (ids.min_shape, ids.max_shape, ids.opt_shape) == ([1, 10, 4], [4, 15, 4], [4, 12, 4])
    assert meta.spec(meta.locators[1]).get_batch_axis_multipliers() == {0: 2}
    assert meta.has_batch_axis() and meta.has_dynamic_axis()
    assert meta.batch_range() == (1, 4)
    assert meta.num_samples == 3
    assert meta.batch_size is None


def test_update_keeps_batch_size_when_all_samples_share_it() -> None:
    meta = learned(({"x": torch.zeros(2, 3)}, 2), ({"x": torch.zeros(2, 5)}, 2))
    assert meta.batch_size == 2
    assert shapes(meta) == {"x": [2, "dim1"]}
    assert meta.batch_range() is None


def test_update_rejects_a_different_set_of_tensors() -> None:
    meta = SampleMetadata.from_inputs({"x": torch.ones(1), "y": torch.ones(1)})
    with pytest.raises(ValueError, match=r"different tensors \(y\)"):
        meta.update_shapes_seen(SampleMetadata.from_inputs({"x": torch.ones(1)}))
    with pytest.raises(ValueError, match=r"tensor `z` is not in this metadata"):
        meta.update_shapes_seen(SampleMetadata.from_inputs({"x": torch.ones(1), "z": torch.ones(1)}))


def test_update_rank_change_raises_naming_the_tensor() -> None:
    meta = SampleMetadata.from_inputs({"inputs": Encoded(torch.zeros(1, 4), "en")}, batch_size=1)
    other = SampleMetadata.from_inputs({"inputs": Encoded(torch.zeros(2, 4, 1), "en")}, batch_size=2)
    with pytest.raises(ValueError, match=r"tensor `inputs\.ids`: rank changed from 2 to 3"):
        meta.update_shapes_seen(other)


def test_copy_is_independent_of_the_original() -> None:
    meta = SampleMetadata.from_inputs({"x": torch.zeros(1, 3)}, batch_size=1)
    clone = meta.copy()
    clone.update_shapes_seen(SampleMetadata.from_inputs({"x": torch.zeros(2, 3)}, batch_size=2))
    assert shapes(clone) == {"x": ["batch0", 3]}
    assert shapes(meta) == {"x": [1, 3]} and meta.num_samples == 1


# ---------------------------------------------------------------------- edge cases


def test_zero_dimensional_tensor() -> None:
    meta = learned(
        ({"scale": torch.tensor(2.0), "x": torch.zeros(1, 2)}, 1),
        ({"scale": torch.tensor(3.0), "x": torch.zeros(2, 2)}, 2),
    )
    assert shapes(meta) == {"scale": [], "x": ["batch0", 2]}
    scale = torch.tensor(5.0)
    out = meta.make_batch({"scale": scale, "x": torch.zeros(1, 2)}, 3)
    assert out["scale"] is scale and out["x"].shape == (3, 2)
    assert meta.make_shape({"scale": scale, "x": torch.zeros(1, 2)}, "max")["scale"].shape == ()


def test_none_argument() -> None:
    inputs = {"x": torch.ones(2, 3), "mask": None, "extra": [None, torch.ones(1)]}
    loose = SampleMetadata.from_inputs(inputs, batch_size=2)
    assert [loc.display_path for loc, _ in loose.tensor_data] == ["x", "extra[1]"]
    strict = SampleMetadata.from_inputs(inputs, strict=True, batch_size=2)
    assert [(loc.display_path, value) for loc, value in strict.other_data] == [("mask", None), ("extra[0]", None)]
    out = strict.make_batch(inputs, 1)
    assert out["mask"] is None and out["extra"][0] is None


def test_empty_containers() -> None:
    inputs = {"a": [], "b": {}, "c": (), "x": torch.ones(1, 2)}
    meta = learned((inputs, 1), ({"a": [], "b": {}, "c": (), "x": torch.ones(2, 2)}, 2), strict=True)
    assert [loc.display_path for loc, _ in meta.tensor_data] == ["x"]
    assert meta.other_data == []
    out = meta.make_batch(inputs, 4)
    assert out["a"] == [] and out["b"] == {} and out["c"] == ()
    assert out["x"].shape == (4, 2)
    only_empty = SampleMetadata.from_inputs({"a": [], "b": {}}, strict=True)
    assert only_empty.describe(InfoLevel.SHORT) == "Tensors: none"
    assert repr(only_empty) == "Tensors: none"
    assert only_empty.make_batch({"a": [], "b": {}}, 2) == {"a": [], "b": {}}


def test_dimension_equal_to_batch_size_by_coincidence_stays_static() -> None:
    meta = learned(({"x": torch.zeros(2, 2)}, 2), ({"x": torch.zeros(4, 2)}, 4))
    assert shapes(meta) == {"x": ["batch0", 2]}
    assert meta.make_batch({"x": torch.zeros(2, 2)}, 8)["x"].shape == (8, 2)


def test_batch_sizes_two_and_four_without_one() -> None:
    meta = learned(
        ({"x": torch.zeros(2, 5), "y": torch.zeros(4)}, 2), ({"x": torch.zeros(4, 5), "y": torch.zeros(8)}, 4)
    )
    assert shapes(meta) == {"x": ["batch0", 5], "y": ["batch0"]}
    assert meta.batch_range() == (2, 4)
    out = meta.make_batch({"x": torch.zeros(2, 5), "y": torch.zeros(4)}, 1)
    assert out["x"].shape == (1, 5) and out["y"].shape == (2,)


def test_multiplier_of_one_and_a_half_is_dynamic_not_batch() -> None:
    meta = learned(({"x": torch.zeros(3, 4)}, 2), ({"x": torch.zeros(6, 4)}, 4))
    assert shapes(meta) == {"x": ["dim0", 4]}
    assert not meta.has_batch_axis()
    assert meta.batch_range() is None
    tensor = torch.zeros(3, 4)
    assert meta.make_batch({"x": tensor}, 8)["x"] is tensor


def test_meta_device_tensors() -> None:
    meta = learned(({"x": torch.empty(1, 8, device="meta")}, 1), ({"x": torch.empty(2, 8, device="meta")}, 2))
    assert shapes(meta) == {"x": ["batch0", 8]}
    out = meta.make_batch({"x": torch.empty(2, 8, device="meta")}, 5)
    assert out["x"].shape == (5, 8) and out["x"].is_meta


def test_unsupported_object_is_a_leaf_not_a_crash() -> None:
    class Tokenizer:
        pass

    tokenizer = Tokenizer()
    inputs = {"x": torch.ones(1, 2), "tok": tokenizer, "things": {1, 2}}
    meta = SampleMetadata.from_inputs(inputs, strict=True, batch_size=1)
    assert [(loc.display_path, value) for loc, value in meta.other_data] == [("tok", tokenizer), ("things", {1, 2})]
    assert "Tokenizer object" in meta.describe(InfoLevel.FULL)
    out = meta.make_batch(inputs, 2)
    assert out["tok"] is tokenizer and out["things"] == {1, 2}


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", None, True])
def test_make_batch_rejects_batch_size_below_one_or_not_an_int(bad: Any) -> None:
    meta = learned(({"x": torch.zeros(1, 2)}, 1), ({"x": torch.zeros(2, 2)}, 2))
    with pytest.raises(ValueError, match=r"batch_size must be a whole number of at least 1, got"):
        meta.make_batch({"x": torch.zeros(1, 2)}, bad)


@pytest.mark.parametrize("shape", [(3,), (1, 2, 1), ()])
def test_make_batch_and_make_shape_reject_a_rank_change_naming_the_tensor(shape: tuple[int, ...]) -> None:
    meta = learned(({"seq": [torch.zeros(1, 2)]}, 1), ({"seq": [torch.zeros(2, 2)]}, 2))
    bad = {"seq": [torch.zeros(shape)]}
    with pytest.raises(ValueError, match=r"tensor `seq\[0\]` has rank \d .* recorded with rank 2"):
        meta.make_batch(bad, 4)
    with pytest.raises(ValueError, match=r"tensor `seq\[0\]` has rank \d .* recorded with rank 2"):
        meta.make_shape(bad, "max")


def test_ten_thousand_leaves() -> None:
    first = {"xs": [torch.zeros(1, 2) for _ in range(10_000)]}
    second = {"xs": [torch.zeros(2, 2) for _ in range(10_000)]}
    meta = learned((first, 1), (second, 2))
    assert len(meta.tensor_data) == 10_000
    assert {tuple(spec.shape) for _, spec in meta.tensor_data} == {("batch0", 2)}
    assert meta.tensor_data[-1][0].display_path == "xs[9999]"
    out = meta.make_batch(first, 3)
    assert len(out["xs"]) == 10_000 and out["xs"][9999].shape == (3, 2)


# ---------------------------------------------------------------------- make_batch


@pytest.fixture
def batch_meta() -> SampleMetadata:
    return learned(
        ({"features": torch.zeros(1, 5), "stacked": torch.zeros(2, 3), "table": torch.zeros(4)}, 1),
        ({"features": torch.zeros(2, 5), "stacked": torch.zeros(4, 3), "table": torch.zeros(4)}, 2),
    )


def test_make_batch_repeats_when_smaller(batch_meta: SampleMetadata) -> None:
    features = torch.arange(10.0).reshape(2, 5)
    out = batch_meta.make_batch({"features": features}, 5)
    assert out["features"].shape == (5, 5)
    assert torch.equal(out["features"], features[[0, 1, 0, 1, 0]])


def test_make_batch_slices_when_larger(batch_meta: SampleMetadata) -> None:
    features = torch.arange(20.0).reshape(4, 5)
    out = batch_meta.make_batch({"features": features}, 3)
    assert torch.equal(out["features"], features[:3])


def test_make_batch_scales_multipliers_above_one(batch_meta: SampleMetadata) -> None:
    stacked = torch.arange(6.0).reshape(2, 3)
    out = batch_meta.make_batch({"stacked": stacked}, 3)
    assert out["stacked"].shape == (6, 3)
    assert torch.equal(out["stacked"], torch.cat([stacked, stacked, stacked]))
    assert batch_meta.make_batch({"stacked": torch.zeros(10, 3)}, 1)["stacked"].shape == (2, 3)


def test_make_batch_leaves_static_and_unknown_tensors_alone(batch_meta: SampleMetadata) -> None:
    table, unknown = torch.zeros(4), torch.zeros(9, 9)
    out = batch_meta.make_batch({"table": table, "unknown": unknown}, 7)
    assert out["table"] is table and out["unknown"] is unknown


def test_make_batch_never_mutates_its_input() -> None:
    meta = learned(
        ({"seq": [torch.zeros(1, 2), (torch.zeros(1), "tag")], "enc": Encoded(torch.zeros(1, 3), "en")}, 1),
        ({"seq": [torch.zeros(2, 2), (torch.zeros(2), "tag")], "enc": Encoded(torch.zeros(2, 3), "en")}, 2),
    )
    inner_list = [torch.arange(2.0).reshape(1, 2), (torch.tensor([7.0]), "tag")]
    enc = Encoded(torch.arange(3).reshape(1, 3), "en")
    inputs = {"seq": inner_list, "enc": enc}
    snapshot = (inner_list[0].clone(), inner_list[1][0].clone(), enc.ids.clone())

    out = meta.make_batch(inputs, 4)

    assert inputs["seq"] is inner_list and len(inner_list) == 2 and inputs["enc"] is enc
    assert inner_list[0].shape == (1, 2) and inner_list[1][0].shape == (1,) and enc.ids.shape == (1, 3)
    assert torch.equal(inner_list[0], snapshot[0]) and torch.equal(inner_list[1][0], snapshot[1])
    assert torch.equal(enc.ids, snapshot[2])
    assert out["seq"] is not inner_list and out["enc"] is not enc
    out["seq"][0][0, 0] = 100.0  # a repeated result is its own storage
    assert torch.equal(inner_list[0], snapshot[0])


def test_make_batch_keeps_containers_and_non_tensor_values() -> None:
    def sample(bs: int) -> dict[str, Any]:
        return {
            "pair": Pair(torch.zeros(bs, 2), "left-label"),
            "enc": Encoded(torch.zeros(bs, 3, dtype=torch.int64), "de"),
            "opts": collections.OrderedDict(scale=0.5, mask=torch.ones(bs, dtype=torch.bool)),
            "tup": (torch.zeros(bs), 3),
            "mode": "eval",
        }

    meta = learned((sample(1), 1), (sample(2), 2), strict=True)
    out = meta.make_batch(sample(1), 6)
    assert type(out["pair"]) is Pair and out["pair"].right == "left-label" and out["pair"].left.shape == (6, 2)
    assert type(out["enc"]) is Encoded and out["enc"].lang == "de" and out["enc"].ids.dtype == torch.int64
    assert out["enc"].ids.shape == (6, 3)
    assert type(out["opts"]) is collections.OrderedDict and out["opts"]["scale"] == 0.5
    assert out["opts"]["mask"].shape == (6,) and out["opts"]["mask"].dtype == torch.bool
    assert type(out["tup"]) is tuple and out["tup"][1] == 3 and out["tup"][0].shape == (6,)
    assert out["mode"] == "eval"
    assert list(out) == list(sample(1))


def test_make_batch_requires_a_dict_of_inputs(batch_meta: SampleMetadata) -> None:
    with pytest.raises(TypeError, match="keyed by forward parameter name"):
        batch_meta.make_batch([torch.zeros(1, 5)], 2)


def test_make_batch_on_output_metadata() -> None:
    meta = SampleMetadata.from_outputs((torch.zeros(1, 10), {"aux": torch.zeros(1)}), batch_size=1)
    meta.update_shapes_seen(SampleMetadata.from_outputs((torch.zeros(2, 10), {"aux": torch.zeros(2)}), batch_size=2))
    assert shapes(meta) == {"output[0]": ["batch0", 10], 'output[1]["aux"]': ["batch0"]}
    out = meta.make_batch((torch.zeros(2, 10), {"aux": torch.zeros(2)}), 3)
    assert type(out) is tuple and out[0].shape == (3, 10) and out[1]["aux"].shape == (3,)


def test_make_batch_as_the_guide_shows() -> None:
    meta = learned(
        ({"features": torch.randn(1, 5), "stacked": torch.randn(2, 3), "mask": torch.randn(1, 10)}, 1),
        ({"features": torch.randn(2, 5), "stacked": torch.randn(4, 3), "mask": torch.randn(2, 10)}, 2),
    )
    out = meta.make_batch({"features": torch.randn(1, 5), "stacked": torch.randn(2, 3), "mask": torch.randn(1, 10)}, 10)
    assert {name: tuple(t.shape) for name, t in out.items()} == {
        "features": (10, 5),
        "stacked": (20, 3),
        "mask": (10, 10),
    }


# ---------------------------------------------------------------------- make_shape


def test_make_shape_min_opt_max() -> None:
    meta = learned(
        ({"ids": torch.zeros(1, 10, dtype=torch.int64), "table": torch.zeros(3)}, 1),
        ({"ids": torch.zeros(4, 20, dtype=torch.int64), "table": torch.zeros(3)}, 4),
    )
    ids = torch.arange(24).reshape(2, 12)
    inputs = {"ids": ids, "table": torch.zeros(3)}
    assert meta.make_shape(inputs, "min")["ids"].shape == (1, 10)
    assert meta.make_shape(inputs, "opt")["ids"].shape == (4, 15)
    assert meta.make_shape(inputs, "max")["ids"].shape == (4, 20)
    grown = meta.make_shape(inputs, "max")["ids"]
    assert torch.equal(grown[:2, :12], ids)  # made from the recorded values, not random ones
    assert set(grown.unique().tolist()) <= set(ids.unique().tolist())
    assert meta.make_shape(inputs, "min")["table"].shape == (3,)
    assert ids.shape == (2, 12)


def test_make_shape_rejects_an_unknown_choice() -> None:
    meta = SampleMetadata.from_inputs({"x": torch.zeros(1)})
    with pytest.raises(ValueError, match="which must be 'min', 'opt' or 'max'"):
        meta.make_shape({"x": torch.zeros(1)}, "mid")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- describe


STRICT_INPUTS_FULL = """\
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ values[1]     │ ('values', 1)   │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Other:
╒═══════════════╤═════════════════╤═════════╕
│ Access Path   │ Semantic Path   │ Value   │
╞═══════════════╪═════════════════╪═════════╡
│ values[0]     │ ('values', 0)   │ 1       │
├───────────────┼─────────────────┼─────────┤
│ mode          │ mode            │ eval    │
├───────────────┼─────────────────┼─────────┤
│ skip          │ skip            │ None    │
╘═══════════════╧═════════════════╧═════════╛"""

STRICT_INPUTS_MEDIUM = """\
Tensors:
Access Path    Semantic Path    Shape
-------------  ---------------  -------
values[1]      ('values', 1)    [2, 2]
Other:
Access Path    Semantic Path    Value
-------------  ---------------  -------
values[0]      ('values', 0)    1
mode           mode             eval
skip           skip             None"""


def strict_meta() -> SampleMetadata:
    return SampleMetadata.from_inputs({"values": (1, torch.zeros(2, 2)), "mode": "eval", "skip": None}, strict=True)


def test_describe_strict_tables_at_every_level() -> None:
    meta = strict_meta()
    assert meta.describe(InfoLevel.SHORT) == "Tensors: values[1]\nOther: values[0], mode, skip"
    assert meta.describe(InfoLevel.MEDIUM) == STRICT_INPUTS_MEDIUM
    assert meta.describe(InfoLevel.FULL) == STRICT_INPUTS_FULL
    assert meta.describe() == STRICT_INPUTS_FULL


def test_describe_non_strict_has_no_other_table() -> None:
    meta = SampleMetadata.from_inputs({"values": (1, torch.zeros(2, 2)), "mode": "eval", "skip": None})
    assert meta.describe(InfoLevel.SHORT) == "Tensors: values[1]"
    assert "Other" not in meta.describe(InfoLevel.MEDIUM)
    assert meta.describe(InfoLevel.FULL) == STRICT_INPUTS_FULL.split("\nOther:")[0]


def test_describe_only_other_values() -> None:
    meta = SampleMetadata.from_inputs({"mode": "eval"}, strict=True)
    assert meta.describe(InfoLevel.SHORT) == "Tensors: none\nOther: mode"
    assert meta.describe(InfoLevel.MEDIUM) == (
        "Tensors: none\nOther:\n"
        "Access Path    Semantic Path    Value\n"
        "-------------  ---------------  -------\n"
        "mode           mode             eval"
    )


def test_describe_shows_learned_axes_and_ranges() -> None:
    meta = learned(({"data": torch.zeros(1, 10)}, 1), ({"data": torch.zeros(2, 25)}, 2))
    assert meta.describe(InfoLevel.MEDIUM) == (
        "Tensors:\n"
        "Access Path    Semantic Path    Shape\n"
        "-------------  ---------------  ------------------\n"
        "data           data             ['batch0', 'dim1']"
    )
    full = meta.describe(InfoLevel.FULL)
    assert (
        "│ data          │ data            │ ['batch0', 'dim1'] │ [1, 10]     │ [2, 25]     │ torch.float32 │" in full
    )


def test_repr_and_str_equal_full() -> None:
    meta = strict_meta()
    assert repr(meta) == meta.describe(InfoLevel.FULL) == str(meta)
