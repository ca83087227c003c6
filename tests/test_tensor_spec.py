"""TensorSpec: static, batch and dynamic axes, ranges, multipliers and merging."""

from __future__ import annotations

import pytest
import torch

from aitune_core import TensorSpec


def learned(*samples: tuple[tuple[int, ...], int | None], dtype: torch.dtype = torch.float32) -> TensorSpec:
    """A spec widened with every ``(shape, batch_size)`` sample, in order."""
    (first_shape, first_bs), *rest = samples
    spec = TensorSpec.from_shape(first_shape, dtype, first_bs)
    for shape, batch_size in rest:
        spec.merge(TensorSpec.from_shape(shape, dtype, batch_size))
    return spec


def test_single_sample_is_static_even_where_a_size_equals_the_batch_size() -> None:
    spec = TensorSpec.from_tensor(torch.zeros(4, 4, dtype=torch.int64), batch_size=4)
    assert spec.shape == [4, 4]
    assert spec.min_shape == spec.max_shape == spec.opt_shape == [4, 4]
    assert spec.dtype == torch.int64
    assert not spec.has_batch_axis() and not spec.has_dynamic_axis()
    assert spec.get_batch_axis_multipliers() == {}


def test_batch_axis_with_multiplier_one() -> None:
    spec = learned(((1, 5), 1), ((2, 5), 2), ((4, 5), 4))
    assert spec.shape == ["batch0", 5]
    assert (spec.min_shape, spec.max_shape) == ([1, 5], [4, 5])
    assert spec.get_batch_axis_multipliers() == {0: 1}
    assert spec.has_batch_axis() and not spec.has_dynamic_axis()


def test_batch_axis_with_integer_multiplier_above_one() -> None:
    spec = learned(((2, 3), 1), ((4, 3), 2), ((16, 3), 8))
    assert spec.shape == ["batch0", 3]
    assert spec.get_batch_axis_multipliers() == {0: 2}


def test_two_batch_axes_with_different_multipliers() -> None:
    spec = learned(((1, 10), 1), ((2, 20), 2))
    assert spec.shape == ["batch0", "batch1"]
    assert spec.get_batch_axis_multipliers() == {0: 1, 1: 10}


def test_multiplier_must_stay_the_same_across_samples() -> None:
    spec = learned(((2,), 1), ((4,), 2))
    assert spec.shape == ["batch0"]
    spec.merge(TensorSpec.from_shape((5,), torch.float32, 3))  # 5 / 3 is not 2
    assert spec.shape == ["dim0"]
    assert spec.get_batch_axis_multipliers() == {}
    assert spec.has_dynamic_axis() and not spec.has_batch_axis()


def test_multiplier_of_one_and_a_half_is_dynamic_not_batch() -> None:
    spec = learned(((3,), 2), ((6,), 4), ((12,), 8))
    assert spec.shape == ["dim0"]
    assert spec.get_batch_axis_multipliers() == {}
    assert spec.dynamic_axes() == [0]


def test_fractional_multiplier_below_one_is_dynamic() -> None:
    spec = learned(((1,), 2), ((2,), 4))
    assert spec.shape == ["dim0"]


def test_batch_sizes_two_and_four_without_one() -> None:
    spec = learned(((2, 7), 2), ((4, 7), 4))
    assert spec.shape == ["batch0", 7]
    assert spec.get_batch_axis_multipliers() == {0: 1}
    assert (spec.min_shape, spec.max_shape) == ([2, 7], [4, 7])


def test_size_equal_to_batch_size_by_coincidence_stays_static() -> None:
    spec = learned(((2, 2), 2), ((4, 2), 4))
    assert spec.shape == ["batch0", 2]
    assert spec.get_batch_axis_multipliers() == {0: 1}


def test_dynamic_axis_is_named_by_position() -> None:
    spec = learned(((1, 10, 512), 1), ((2, 50, 512), 2))
    assert spec.shape == ["batch0", "dim1", 512]
    assert spec.dynamic_axes() == [1]


def test_size_that_changes_without_a_batch_size_is_dynamic() -> None:
    spec = learned(((1, 3), None), ((2, 3), None))
    assert spec.shape == ["dim0", 3]
    mixed = learned(((1, 3), 1), ((2, 3), None))
    assert mixed.shape == ["dim0", 3]


def test_min_max_are_tracked_per_axis_independently() -> None:
    spec = learned(((1, 30), 1), ((4, 10), 4), ((2, 20), 2))
    assert spec.min_shape == [1, 10]
    assert spec.max_shape == [4, 30]
    assert spec.shape == ["batch0", "dim1"]


def test_opt_shape_is_largest_batch_and_middle_of_dynamic_range() -> None:
    spec = learned(((1, 10, 3), 1), ((4, 21, 3), 4))
    assert spec.shape == ["batch0", "dim1", 3]
    assert spec.opt_shape == [4, 15, 3]


def test_zero_dimensional_tensor() -> None:
    spec = TensorSpec.from_tensor(torch.tensor(1.5), batch_size=1)
    spec.merge(TensorSpec.from_tensor(torch.tensor(2.5), batch_size=2))
    assert spec.rank == 0
    assert spec.shape == spec.min_shape == spec.max_shape == spec.opt_shape == []
    assert not spec.has_batch_axis() and not spec.has_dynamic_axis()
    assert spec.contains(()) and not spec.contains((1,))


def test_rank_change_raises_naming_the_tensor() -> None:
    spec = TensorSpec.from_shape((2, 3), torch.float32, 2)
    with pytest.raises(ValueError, match=r"tensor `x`: rank changed from 2 to 3"):
        spec.merge(TensorSpec.from_shape((2, 3, 1), torch.float32, 2), where="tensor `x`")
    assert spec.min_shape == [2, 3]


def test_dtype_change_raises() -> None:
    spec = TensorSpec.from_shape((2,), torch.float32)
    with pytest.raises(ValueError, match=r"dtype changed from torch.float32 to torch.float16"):
        spec.merge(TensorSpec.from_shape((2,), torch.float16))


def test_matches_compares_rank_and_dtype_only() -> None:
    spec = TensorSpec.from_shape((2, 3), torch.float32)
    assert spec.matches(TensorSpec.from_shape((7, 9), torch.float32))
    assert not spec.matches(TensorSpec.from_shape((2, 3, 1), torch.float32))
    assert not spec.matches(TensorSpec.from_shape((2, 3), torch.bfloat16))


def test_contains_checks_every_axis_against_its_range() -> None:
    spec = learned(((1, 10), 1), ((4, 20), 4))
    assert spec.contains((3, 15)) and spec.contains((1, 20))
    assert not spec.contains((5, 15)) and not spec.contains((3, 9)) and not spec.contains((3,))


def test_copy_is_independent() -> None:
    spec = learned(((1, 3), 1), ((2, 3), 2))
    clone = spec.copy()
    assert clone == spec
    clone.merge(TensorSpec.from_shape((8, 5), torch.float32, 8))
    assert clone.shape == ["batch0", "dim1"]
    assert spec.shape == ["batch0", 3] and spec.max_shape == [2, 3]


def test_meta_tensor_spec() -> None:
    spec = TensorSpec.from_tensor(torch.empty(3, 4, device="meta"), batch_size=3)
    spec.merge(TensorSpec.from_tensor(torch.empty(6, 4, device="meta"), batch_size=6))
    assert spec.shape == ["batch0", 4]
