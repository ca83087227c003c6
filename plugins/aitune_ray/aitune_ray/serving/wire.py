"""The application's HTTP format: JSON in, JSON out.

A request is a JSON object ``{"inputs": [x1, x2, ...]}``: the positional arguments of
the model's ``forward``, each a tensor written as nested lists, with the batch axis
first (one request may carry several rows). Numbers written with a decimal point
(``1.0``) become float32 tensors, whole numbers int64 ones, as ``torch.tensor`` reads
them. The answer is ``{"outputs": y}``: the model's outputs for those rows, tensors
as nested lists, tuples and lists as lists, dicts as objects. float32 values go through
JSON unchanged (each is written exactly as a double), so what a client reads is what
the model returned.

A request that cannot be read gets ``400`` with ``{"error": ...}`` naming what is
wrong; one with more rows than the application batches gets ``413``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import torch

MAX_BODY_BYTES = 64 * 2**20
"""The largest request body read, well above a batch of images; a larger one gets 413."""


class BadRequest(Exception):
    """A request the application cannot serve: ``status`` is the HTTP status, the message says why and the fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@attrs.frozen(eq=False)
class Job:
    """One request's inputs, decoded: ``rows`` items along axis 0 of every input."""

    inputs: tuple[torch.Tensor, ...]
    rows: int

    def signature(self) -> tuple[Any, ...]:
        """What requests must share to be stacked into one call: every input's dtype and shape past axis 0."""
        return tuple((tensor.dtype, tuple(tensor.shape[1:])) for tensor in self.inputs)


def decode(body: bytes, max_rows: int) -> Job:
    """The job a request body asks for; BadRequest when it cannot be read or is larger than ``max_rows``."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(413, f"the body is {len(body)} bytes, more than the {MAX_BODY_BYTES} this server reads")
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadRequest(400, f'the body is not JSON ({error}); send {{"inputs": [[...], ...]}}') from None
    if not isinstance(payload, dict) or not isinstance(payload.get("inputs"), list) or not payload["inputs"]:
        raise BadRequest(
            400,
            'the body must be a JSON object {"inputs": [x1, ...]}: the positional inputs of the model, each a '
            "tensor as nested lists with the batch axis first",
        )
    unknown = sorted(set(payload) - {"inputs"})
    if unknown:
        raise BadRequest(400, f"unknown field(s) {', '.join(map(repr, unknown))}; the body has only 'inputs'")
    inputs = tuple(_tensor(index, value) for index, value in enumerate(payload["inputs"]))
    rows = {tensor.shape[0] for tensor in inputs}
    if len(rows) != 1:
        sizes = ", ".join(str(tensor.shape[0]) for tensor in inputs)
        raise BadRequest(400, f"every input must have the same number of rows (axis 0); got {sizes}")
    count = rows.pop()
    if count == 0:
        raise BadRequest(400, "the inputs have no rows (axis 0 is empty)")
    if count > max_rows:
        raise BadRequest(
            413,
            f"{count} rows in one request, more than the {max_rows} this application batches; send at most "
            f"{max_rows} per request",
        )
    return Job(inputs, count)


def _tensor(index: int, value: Any) -> torch.Tensor:
    if isinstance(value, bool) or not isinstance(value, list):
        raise BadRequest(400, f"inputs[{index}] must be a tensor as nested lists with the batch axis first")
    try:
        tensor = torch.tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise BadRequest(400, f"inputs[{index}] is not a rectangular array of numbers: {error}") from None
    if tensor.dtype == torch.bool or tensor.dim() == 0:
        raise BadRequest(400, f"inputs[{index}] must be an array of numbers with the batch axis first")
    return tensor


def stack(jobs: Sequence[Job]) -> tuple[torch.Tensor, ...]:
    """The inputs of jobs of one signature, as one call's: each input concatenated along axis 0."""
    if len(jobs) == 1:
        return jobs[0].inputs
    return tuple(torch.cat(parts) for parts in zip(*(job.inputs for job in jobs), strict=True))


def split(outputs: Any, rows: Sequence[int]) -> list[Any]:
    """One call's outputs cut back into each job's rows, along axis 0 of every tensor.

    ValueError when a tensor output has no axis 0 of the batch's rows: the model does not
    return one row per input row, and requests must not be stacked for it.
    """
    if len(rows) == 1:
        return [outputs]
    total = sum(rows)

    def cut(value: Any) -> list[Any]:
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or value.shape[0] != total:
                raise ValueError(
                    f"an output of shape {tuple(value.shape)} has no axis 0 of the batch's {total} rows: requests "
                    "cannot be stacked for this model; serve it with --max-batch 1"
                )
            return list(torch.split(value, list(rows)))
        if isinstance(value, (tuple, list)):
            pieces = [cut(item) for item in value]
            return [type(value)(piece[i] for piece in pieces) for i in range(len(rows))]
        if isinstance(value, dict):
            by_key = {key: cut(item) for key, item in value.items()}
            return [{key: by_key[key][i] for key in value} for i in range(len(rows))]
        return [value] * len(rows)

    return cut(outputs)


def encode(outputs: Any) -> Any:
    """The model's outputs as JSON values: tensors as nested lists, tuples as lists."""
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().cpu().tolist()
    if isinstance(outputs, (tuple, list)):
        return [encode(item) for item in outputs]
    if isinstance(outputs, dict):
        return {str(key): encode(item) for key, item in outputs.items()}
    if outputs is None or isinstance(outputs, (bool, int, float, str)):
        return outputs
    raise TypeError(f"the model returned a {type(outputs).__name__}, which this application cannot write as JSON")
