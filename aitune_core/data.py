"""Turning a user's dataset into the calls that ``tune`` makes, one batch size at a time.

A dataset is a sequence of *unbatched* samples: tensors, tuples (positional
arguments), dicts (keyword arguments), or anything else passed as the single
argument. A torch ``Dataset`` and a single tensor (its first axis taken as samples)
work too. Samples are stacked into batches of each requested size, cycling through
the data when it is shorter than the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from aitune_core.config import env_text
from aitune_core.metadata.containers import CONTAINERS


class DatasetError(ValueError):
    """The dataset or batch sizes given to ``tune`` cannot be used."""


DATASET_FORMS = (
    "a list (or other sequence) of unbatched samples, a torch Dataset, an iterable that yields samples, "
    "or one tensor whose first axis holds the samples"
)
"""What ``tune`` accepts as a dataset, as every refusal names it."""


def as_sample_list(dataset: Any) -> list[Any]:
    """The dataset's samples, in order; a :class:`DatasetError` that names the accepted forms otherwise."""
    if isinstance(dataset, torch.Tensor):
        if dataset.dim() == 0:
            raise DatasetError("a single tensor dataset needs at least one axis: its first axis holds the samples")
        samples = list(dataset.unbind(0))
    elif isinstance(dataset, (str, bytes, Mapping)):
        raise DatasetError(f"a dataset is {DATASET_FORMS}; got {_not_a_dataset(dataset)}")
    elif _indexable(dataset) and not isinstance(dataset, torch.utils.data.IterableDataset):
        samples = [dataset[index] for index in range(len(dataset))]
    else:
        samples = _read_all(dataset)
    if not samples:
        raise DatasetError(
            f"the dataset is empty; tune needs at least one sample of real input data. A dataset is {DATASET_FORMS}"
        )
    return samples


def _read_all(dataset: Any) -> list[Any]:
    """Every sample an iterable yields; ``iter()`` also takes a map-style Dataset without ``__len__``."""
    try:
        iterator = iter(dataset)
    except TypeError:
        raise DatasetError(f"a dataset is {DATASET_FORMS}; got {_not_a_dataset(dataset)}") from None
    samples = list(iterator)
    if not samples and iterator is dataset:
        raise DatasetError(
            f"the dataset ({type(dataset).__name__}) yielded no samples: an iterator or generator is used up "
            "by one pass (one read before tune leaves nothing). Make a new one for each call, or pass a list"
        )
    return samples


def _indexable(dataset: Any) -> bool:
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


def _not_a_dataset(dataset: Any) -> str:
    if dataset is None:
        return "None. Pass real input data to tune on, e.g. tune(model, [sample_1, sample_2])"
    if isinstance(dataset, Mapping):
        return (
            f"a {type(dataset).__name__}: a dict is one sample, of keyword arguments. "
            "Pass a list of them, one dict a sample"
        )
    return f"{type(dataset).__name__}. Put the samples in a list, one sample an item"


MAX_BATCH_SIZE = 1 << 20
"""The largest batch size ``tune`` accepts unless ``AITUNE_MAX_BATCH_SIZE`` allows more.

Every batch is built by stacking that many samples, one Python step each, and then
run through eager and every candidate: a million samples of even 1 KiB make a GiB per
batch and minutes of stacking before the first call. The largest batches served in
practice (recommendation models) stay around 10^5, so a size beyond 2^20 is almost
always a typo (``10**9`` for ``10**3``); it is refused before any work is done rather
than after the machine has run out of memory building it.
"""

MAX_BATCH_SIZE_VARIABLE = "AITUNE_MAX_BATCH_SIZE"


def max_batch_size() -> int:
    """:data:`MAX_BATCH_SIZE`, or the whole number in ``AITUNE_MAX_BATCH_SIZE``."""
    text = env_text(MAX_BATCH_SIZE_VARIABLE)
    if not text:
        return MAX_BATCH_SIZE
    if not text.isdigit() or int(text) < 1:
        raise DatasetError(f"{MAX_BATCH_SIZE_VARIABLE} must be a whole number of at least 1, got {text!r}")
    return int(text)


def check_batch_sizes(batch_sizes: Sequence[int] | None) -> list[int] | None:
    """The batch sizes without repeats, in order; refuses what is not a size or is beyond :func:`max_batch_size`."""
    if batch_sizes is None:
        return None
    if isinstance(batch_sizes, int):
        batch_sizes = [batch_sizes]
    result: list[int] = []
    limit = max_batch_size()
    for size in batch_sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise DatasetError(f"batch sizes must be whole numbers of at least 1, got {size!r}")
        if size > limit:
            raise DatasetError(
                f"batch size {size} is larger than the limit of {limit}: each batch stacks that many samples "
                f"in memory. Use a smaller size, or set {MAX_BATCH_SIZE_VARIABLE}={size} to allow it"
            )
        if size not in result:
            result.append(size)
    if not result:
        raise DatasetError("batch_sizes is empty; give at least one batch size, or None to use samples as calls")
    return result


def collate(items: list[Any], where: str = "sample") -> Any:
    """Stack a list of samples of one structure into one batch."""
    first = items[0]
    if isinstance(first, torch.Tensor):
        shapes = {tuple(item.shape) for item in items}
        if len(shapes) > 1:
            raise DatasetError(
                f"{where}: samples have different shapes {sorted(shapes)}; they cannot be stacked into one batch. "
                "Pad them to one shape, or pass batch_sizes=None and give complete calls"
            )
        return torch.stack(items)
    container = CONTAINERS.lookup(type(first))
    if container is not None:
        children = [container.flatten(item) for item in items]
        steps = [step for step, _ in children[0]]
        if any([step for step, _ in child] != steps for child in children):
            raise DatasetError(f"{where}: samples have different structures and cannot be batched together")
        collated = [
            collate([child[index][1] for child in children], f"{where}[{step!r}]") for index, step in enumerate(steps)
        ]
        return container.unflatten(first, collated)
    if all(item == first for item in items[1:]):
        return first
    if all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in items):
        return torch.tensor(items)
    return list(items)


def to_call(batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Tuples and lists are positional arguments, dicts keyword arguments, anything else one argument."""
    if isinstance(batch, dict) and all(isinstance(key, str) for key in batch):
        return (), dict(batch)
    if isinstance(batch, (tuple, list)) and not hasattr(batch, "_fields"):
        return tuple(batch), {}
    return (batch,), {}


def samples_generator(
    dataset: Any, batch_sizes: Sequence[int] | None, max_num_batches_per_batch_size: int | None = None
) -> Iterator[tuple[int | None, tuple[Any, ...], dict[str, Any]]]:
    """Yield ``(batch_size, args, kwargs)`` for every call ``tune`` makes while gathering.

    With ``batch_sizes=None`` each dataset item is one complete call, used as given.
    """
    samples = as_sample_list(dataset)
    sizes = check_batch_sizes(batch_sizes)
    limit = max_num_batches_per_batch_size
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DatasetError(f"max_num_batches_per_batch_size must be a whole number of at least 1, got {limit!r}")
    if sizes is None:
        for item in samples[: limit or len(samples)]:
            args, kwargs = to_call(item)
            yield None, args, kwargs
        return
    for size in sizes:
        count = max(1, math.ceil(len(samples) / size))
        if limit is not None:
            count = min(count, limit)
        for index in range(count):
            items = [samples[(index * size + offset) % len(samples)] for offset in range(size)]
            args, kwargs = to_call(collate(items))
            yield size, args, kwargs
