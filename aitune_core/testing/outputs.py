"""Comparing a backend's outputs with eager's, whatever the module returns.

``torch.testing.assert_close`` compares tensors in tuples, lists and dicts, but refuses
anything else it finds there: a module that returns ``{"hidden": t, "tag": "nested"}``
could not be compared at all. Here every tensor is compared as ``assert_close`` does,
and every other leaf (strings, numbers, None) must be equal, at the same place.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.metadata.locator import Locator, map_leaves, walk_outputs

_PLACEHOLDER = torch.zeros(())


def assert_outputs_close(actual: Any, expected: Any, rtol: float | None, atol: float | None, what: str) -> None:
    """``actual`` has ``expected``'s structure, its tensors are close and its other leaves equal."""
    got = dict(walk_outputs(actual))
    want = dict(walk_outputs(expected))
    for locator, value in want.items():
        if isinstance(value, torch.Tensor) or locator not in got:
            continue
        assert got[locator] == value, f"{what}: {locator.display_path} is {got[locator]!r}, eager's {value!r}"
    torch.testing.assert_close(
        _tensors_only(actual), _tensors_only(expected), rtol=rtol, atol=atol, msg=lambda message: f"{what}: {message}"
    )


def _tensors_only(value: Any) -> Any:
    """The structure with every non-tensor leaf made the same placeholder tensor (compared above)."""
    return map_leaves(value, Locator(None), lambda _, leaf: leaf if isinstance(leaf, torch.Tensor) else _PLACEHOLDER)
