"""Rendering metadata as the tables users read in every tuning log.

The formats are fixed by the documentation: ``fancy_grid`` for the FULL level,
``simple`` for MEDIUM, and a one-line list of access paths for SHORT. Cells are
passed as strings with number parsing off, so ``1`` is left-aligned like ``abc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TENSOR_HEADERS_FULL = ["Access Path", "Semantic Path", "Shape", "Min Shape", "Max Shape", "Dtype"]
TENSOR_HEADERS_MEDIUM = ["Access Path", "Semantic Path", "Shape"]
OTHER_HEADERS = ["Access Path", "Semantic Path", "Value"]


def render_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], fmt: str) -> str:
    from tabulate import tabulate  # imported on first use: it is not needed to record or route calls

    return tabulate(
        [[str(cell) for cell in row] for row in rows],
        headers=list(headers),
        tablefmt=fmt,
        disable_numparse=True,
    )
