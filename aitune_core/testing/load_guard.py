"""A test guard: every ``load`` that fails must leave the model exactly as it was.

``guard_failed_loads(monkeypatch)`` wraps the two phases of loading (checking, then
applying) for one test, so it also covers code that imported ``load`` by name. Use it
from an autouse fixture to hold a whole test suite to loading's all-or-nothing promise.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch import nn

from aitune_core.guard.snapshot import fingerprint as tensor_fingerprint
from aitune_core.guard.snapshot import same_storage


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Everything a load could change: tensors (objects, storage and values), modes, the module tree."""
    return {
        "state": {
            name: (id(tensor), tensor_fingerprint(tensor), tensor.detach().clone())
            for name, tensor in model.state_dict(keep_vars=True).items()
        },
        "modes": [(name, module.training) for name, module in model.named_modules()],
        "types": [(name, type(module)) for name, module in model.named_modules()],
        "modules": [id(module) for module in model.modules()],
    }


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["modes"] == after["modes"], "a failed load changed modes"
    assert before["types"] == after["types"], "a failed load changed the module tree"
    assert before["modules"] == after["modules"], "a failed load replaced submodules"
    assert before["state"].keys() == after["state"].keys(), "a failed load changed the state dict's keys"
    for name, (identity, seen, values) in before["state"].items():
        identity_after, seen_after, values_after = after["state"][name]
        assert identity == identity_after and same_storage(seen, seen_after), f"a failed load replaced {name}"
        if values.device.type != "meta":
            torch.testing.assert_close(values, values_after, rtol=0, atol=0, msg=f"a failed load changed {name}")


def guard_failed_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Check every failed load of this test; returns the phases that failed and were checked."""
    load_module = importlib.import_module("aitune_core.checkpoint.load")
    checked: list[str] = []

    def guarded(phase: Any) -> Any:
        def run(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
            before = fingerprint(model)
            try:
                return phase(model, *args, **kwargs)
            except BaseException:
                assert_unchanged(before, fingerprint(model))
                checked.append(phase.__name__)
                raise

        return run

    monkeypatch.setattr(load_module, "plan_load", guarded(load_module.plan_load))
    monkeypatch.setattr(load_module, "_apply", guarded(load_module._apply))
    return checked
