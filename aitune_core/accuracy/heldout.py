"""The held-out data, and the user's metric on what the whole pipeline returns for it.

A drop measured on the data the backends were tuned on would flatter them, so the
budget is checked on samples tuning never saw: the user's own (``AccuracyBudget.data``)
or every fifth sample of the dataset, held back from tuning. Each configuration runs
``func`` on all of them at every batch size tuned, under ``no_grad`` with the wrapped
modules in eval mode, and the metric scores its outputs against eager's for the same
inputs. The drop reported is the largest over the batch sizes, since routes differ
between them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch

from aitune_core.accuracy.budget import AccuracyBudget, AccuracyError
from aitune_core.backends.build_folders import tensor_bytes
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.data import as_sample_list, samples_generator
from aitune_core.validation.inputs import to_device

HELD_OUT_EVERY = 5
"""Without ``AccuracyBudget.data``, every fifth sample of the dataset is held out (20%)."""


@attrs.frozen
class HeldOut:
    """The held-out samples, what the summary says of them, and their fingerprint for checkpoints."""

    samples: list[Any]
    note: str
    fingerprint: str


def split(dataset: Any, budget: AccuracyBudget) -> tuple[Any, HeldOut]:
    """``(what tuning gathers from, the held-out data)``; the dataset is unchanged when the budget brings its own."""
    if budget.data is not None:
        held = as_sample_list(budget.data)
        return dataset, HeldOut(held, f"{len(held)} samples given (AccuracyBudget.data)", fingerprint(held))
    samples = as_sample_list(dataset)
    if len(samples) < 2:
        raise AccuracyError(
            f"the dataset has {len(samples)} sample; holding some out for the accuracy budget needs at least 2. "
            "Give more samples, or held-out ones with AccuracyBudget(..., data=...)"
        )
    held = [s for i, s in enumerate(samples) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1] or [samples[-1]]
    kept = [s for i, s in enumerate(samples) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    if len(kept) == len(samples):
        kept = samples[:-1]
    note = f"{len(held)} of the dataset's {len(samples)} samples (every {HELD_OUT_EVERY}th), not used for tuning"
    return kept, HeldOut(held, note, fingerprint(held))


def fingerprint(samples: list[Any]) -> str:
    """sha256 of the samples' values, dtypes and shapes (16 hex digits): which data a drop was measured on."""
    digest = hashlib.sha256()
    for sample in samples:
        _feed(digest, sample)
    return digest.hexdigest()[:16]


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        digest.update(f"T{value.dtype}{tuple(value.shape)}|".encode())
        digest.update(tensor_bytes(value))
    elif isinstance(value, Mapping):
        digest.update(b"{")
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, (tuple, list)):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    else:
        digest.update(repr(value).encode())


Outputs = dict[int | None, Any]
"""What ``func`` returned for the held-out data, by batch size (the batches joined where they can be)."""


def run_pipeline(func: Callable[..., Any], held: HeldOut, sizes: list[int] | None, device: torch.device) -> Outputs:
    """``func``'s outputs on every held-out sample at every batch size, as routed now, without gradients."""
    batches: dict[int | None, list[Any]] = {}
    with torch.no_grad():
        for batch_size, args, kwargs in samples_generator(held.samples, sizes):
            args, kwargs = to_device((args, kwargs), device)
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                output = func(*args, **kwargs)
            batches.setdefault(batch_size, []).append(_detached(output))
    return {size: _join(outputs) for size, outputs in batches.items()}


def drop(budget: AccuracyBudget, outputs: Outputs, reference: Outputs) -> float:
    """``metric(eager, eager) - metric(tuned, eager)``, the largest over the batch sizes."""
    worst = -math.inf
    for size, expected in reference.items():
        best = score(budget, expected, expected)
        worst = max(worst, best - score(budget, outputs[size], expected))
    return worst


def score(budget: AccuracyBudget, outputs: Any, reference: Any) -> float:
    """The metric on joined outputs, or its mean over batches that could not be joined; errors name the metric."""
    if isinstance(outputs, _Batches):
        values = [score(budget, out, ref) for out, ref in zip(outputs, reference, strict=True)]
        return sum(values) / len(values)
    name = budget.metric_name
    try:
        with torch.no_grad():
            value = budget.metric(outputs, reference)
        value = float(value)
    except Exception as error:
        raise AccuracyError(
            f"the accuracy metric {name} raised {type(error).__name__}: {error}. It is called as "
            "metric(outputs, reference_outputs) on what the tuned function returns; the search stopped"
        ) from error
    if not math.isfinite(value):
        raise AccuracyError(
            f"the accuracy metric {name} returned {value}, not a finite number, so no drop can be measured; "
            "the search stopped. Make it return a float for every pair of outputs"
        )
    return value


class _Batches(list[Any]):
    """Outputs that could not be joined into one: the metric is taken per batch and averaged."""


def _detached(value: Any) -> Any:
    """A copy no later call can change (backends may return their own buffers)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return type(value)({key: _detached(item) for key, item in value.items()})
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_detached(item) for item in value)
    return value


def _join(outputs: list[Any]) -> Any:
    """The batches' outputs as one (tensors concatenated along the batch axis); ``_Batches`` where they cannot be."""
    if len(outputs) == 1:
        return outputs[0]
    try:
        return _cat(outputs)
    except (TypeError, ValueError, RuntimeError):
        return _Batches(outputs)


def _cat(outputs: list[Any]) -> Any:
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        if first.dim() == 0:
            raise ValueError("scalar outputs have no batch axis")
        return torch.cat(outputs)
    if isinstance(first, dict):
        if any(not isinstance(o, dict) or o.keys() != first.keys() for o in outputs):
            raise ValueError("outputs with different keys")
        return type(first)(**{key: _cat([o[key] for o in outputs]) for key in first})
    if isinstance(first, (tuple, list)) and not hasattr(first, "_fields"):
        if any(len(o) != len(first) for o in outputs):
            raise ValueError("outputs of different lengths")
        return type(first)(_cat(list(items)) for items in zip(*outputs, strict=True))
    raise TypeError(f"cannot join outputs of type {type(first).__name__}")
