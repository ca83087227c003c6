"""The conformance suite compares whatever a module returns: tensors closely, every other leaf exactly."""

from __future__ import annotations

import pytest
import torch

from aitune_core.testing.outputs import assert_outputs_close


def outputs(scale: float = 1.0, tag: str = "nested") -> dict[str, object]:
    hidden = torch.arange(6.0).reshape(2, 3) * scale
    return {"hidden": hidden, "extra": (hidden.sum(1), None, 3), "tag": tag}


def test_equal_outputs_with_strings_and_none_pass() -> None:
    assert_outputs_close(outputs(), outputs(), None, None, "same")
    assert_outputs_close(outputs(1.0 + 1e-9), outputs(), None, None, "close")


def test_a_different_string_fails_naming_it() -> None:
    with pytest.raises(AssertionError, match=r"output\[\"tag\"\] is 'other', eager's 'nested'"):
        assert_outputs_close(outputs(tag="other"), outputs(), None, None, "opt shapes")


def test_different_tensors_or_structure_fail() -> None:
    with pytest.raises(AssertionError, match="opt shapes"):
        assert_outputs_close(outputs(scale=2.0), outputs(), None, None, "opt shapes")
    missing = outputs()
    del missing["tag"]
    with pytest.raises(AssertionError):
        assert_outputs_close(missing, outputs(), None, None, "opt shapes")
