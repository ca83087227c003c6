"""What ``tune`` says about a dataset it cannot use: a ``DatasetError`` naming the forms it takes and the fix.

A wrong dataset used to surface as Python's own ``TypeError: 'NoneType' object is not
iterable`` from inside ``data.py``, which names neither the argument nor what it may be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from tuning_helpers import FAST_PROFILE, SlowableMLP

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.data import DATASET_FORMS, DatasetError
from aitune_core.strategies import FirstWinsStrategy


def _nothing() -> Iterator[torch.Tensor]:
    yield from ()


def _used_up() -> Iterator[torch.Tensor]:
    samples = iter([torch.randn(16), torch.randn(16)])
    list(samples)  # e.g. inspected, or passed to an earlier tune call
    return samples


@pytest.mark.parametrize(
    ("dataset", "fix"),
    [
        (None, "got None. Pass real input data to tune on"),
        (3, "got int. Put the samples in a list"),
        (object(), "got object. Put the samples in a list"),
        ({"x": torch.randn(16)}, "got a dict: a dict is one sample, of keyword arguments. Pass a list of them"),
        ([], "the dataset is empty; tune needs at least one sample"),
        (_nothing(), r"the dataset \(generator\) yielded no samples.*Make a new one for each call, or pass a list"),
        (_used_up(), r"the dataset \(list_iterator\) yielded no samples.*used up by one pass"),
    ],
    ids=["None", "int", "object", "one-dict", "empty-list", "empty-generator", "used-up-iterator"],
)
def test_a_dataset_tune_cannot_use_is_a_dataset_error_that_names_the_fix(
    unique_name: Callable[..., str], dataset: Any, fix: str
) -> None:
    model = SlowableMLP().eval()
    calls: list[torch.Tensor] = []
    model.register_forward_pre_hook(lambda module, args: calls.append(args[0]))
    module = ait.Module(model, unique_name(), strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    with pytest.raises(DatasetError, match=fix) as raised:
        ait.tune(module, dataset, batch_sizes=[1, 2])
    if "yielded no samples" not in str(raised.value):
        assert DATASET_FORMS in str(raised.value)  # every refusal says what a dataset may be
    assert calls == [] and module.graph_specs == []


def test_what_a_dataset_may_be_still_tunes(unique_name: Callable[..., str]) -> None:
    strategy = FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    samples = [torch.randn(16) for _ in range(3)]

    class MapStyle(torch.utils.data.Dataset[torch.Tensor]):  # __getitem__ only: read until IndexError
        def __getitem__(self, index: int) -> torch.Tensor:
            return samples[index]

    for dataset in [samples, tuple(samples), iter(samples), (s for s in samples), {*samples}, MapStyle()]:
        module = ait.Module(SlowableMLP().eval(), unique_name(), strategy=strategy)
        ait.tune(module, dataset, batch_sizes=[1, 2])
        assert [spec.input_spec.tensor_data[0][1].max_shape for spec in module.graph_specs] == [[2, 16]]
        del module
