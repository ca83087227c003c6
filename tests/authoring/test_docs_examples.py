"""The strategy example of docs/writing-a-backend.md and its test run as written, against a generated plugin."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from aitune_core.authoring.new_plugin import write_plugin
from aitune_core.testing.fixtures import forget_modules

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"  # the checkout, not the installed core


def python_block(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (block,) = [block for block in blocks if containing in block]
    return block


def test_the_strategy_example_and_its_test_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, project, _ = write_plugin("demo-x", tmp_path)
    monkeypatch.syspath_prepend(str(project))
    namespace: dict[str, Any] = {"__name__": "writing_a_backend_example"}
    try:
        exec(compile(python_block("class ShortlistStrategy(TuneStrategy)"), str(DOC), "exec"), namespace)
        exec(compile(python_block("def test_the_shortlist_stops_building"), str(DOC), "exec"), namespace)
        namespace["test_the_shortlist_stops_building_and_the_fastest_serves"]()
    finally:
        forget_modules([project])
