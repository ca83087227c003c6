"""What the tests of exported-graph backends share (aitune-onnx's and aitune-openvino's)."""

from __future__ import annotations

from typing import Any

import pytest

from aitune_core.exported.base import ExportedGraphBackend


def refuse_flattening(monkeypatch: pytest.MonkeyPatch, backend: ExportedGraphBackend) -> None:
    """Make the general path of ``backend``'s calls fail: a test that then calls it shows that the call took the
    one-tensor path, which hands the tensor to the runtime without flattening the call."""

    def flatten(*_: Any) -> Any:
        raise AssertionError("the call was flattened")

    monkeypatch.setattr(backend, "_flatten_call", flatten)
