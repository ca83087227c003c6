"""Flat input and output names from access paths: the documented rule, uniqueness, and the mapping a layout gives."""

from __future__ import annotations

import pytest

from aitune_core.plugin_api.exported import io_names, sanitize, unique_names


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("x", "x"),
        ('values[3]["t"]', "values_3_t"),
        ("output[0]", "output_0"),
        ("output", "output"),
        ("t3.data", "t3_data"),
        ('batch["input ids"][0]', "batch_input_ids_0"),
        ('output["ü"]', "output"),
        ("[0]", "t_0"),
        ('["9lives"]', "t_9lives"),
    ],
)
def test_sanitize(path: str, name: str) -> None:
    assert sanitize(path) == name


def test_names_are_unique_in_order() -> None:
    assert unique_names(["a[0]", "a_0", "a.0", "b"]) == ["a_0", "a_0_2", "a_0_3", "b"]


def test_outputs_never_take_an_input_name() -> None:
    inputs, outputs = io_names(["output", "x"], ["output", "output[0]"])
    assert inputs == ["output", "x"]
    assert outputs == ["output_2", "output_0"]
