"""Small modules, one concept each: no file of the core is over 500 lines."""

from __future__ import annotations

from pathlib import Path

import aitune_core

PACKAGE = Path(aitune_core.__file__).resolve().parent
MAX_LINES = 500


def test_no_core_module_is_over_500_lines() -> None:
    sizes = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: {over}"
