"""Running under autocast and giving back the dtypes eager would have returned.

A backend that computes in float16 must not change what callers receive: outputs
are cast back to the dtypes recorded in the graph's output spec.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from aitune_core.metadata.locator import Locator, map_leaves
from aitune_core.metadata.sample_metadata import SampleMetadata


@contextlib.contextmanager
def autocast(enabled: bool, device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    if not enabled:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def cast_outputs(outputs: Any, output_spec: SampleMetadata) -> Any:
    """Cast every output tensor back to the dtype eager produced at its position."""
    dtypes = {locator: spec.dtype for locator, spec in output_spec.tensor_data}

    def cast(locator: Locator, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            wanted = dtypes.get(locator)
            if wanted is not None and leaf.dtype != wanted:
                return leaf.to(wanted)
        return leaf

    return map_leaves(outputs, Locator(None), cast)
