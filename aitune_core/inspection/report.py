"""The inspection report: where a workload's time goes, module by module, and what to wrap.

A module worth wrapping takes a large share of the time, so that compiling it pays,
and is called with few distinct input structures, so that it is tuned as few graphs.
:meth:`InspectReport.suggest` picks such modules greedily: the largest share first,
fewer graphs and shallower modules breaking ties, never one inside (or around) a
module already picked, until most of the time is covered. When no such set of
submodules covers half the time, the model itself is the thing to wrap.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from aitune_core.inspection.module_timer import ModuleTiming
from aitune_core.metadata.tables import render_table
from aitune_core.wrapping import overlaps

COVERAGE = 0.8
"""Suggestions stop once the picked modules hold this share of the time."""
MIN_SHARE = 0.1
"""A module under this share of the time is never suggested: compiling it cannot pay."""
WHOLE_MODEL = 0.5
"""When the submodules picked hold less than this share, the time is in the model's own
forward (or spread thin): wrapping the whole model is suggested instead."""


@attrs.frozen
class ModuleRow:
    """One module in the report."""

    path: str
    type: str
    depth: int
    calls: int
    total_ms: float
    share: float
    parameters: int
    graphs: int
    note: str = ""


@attrs.define
class InspectReport:
    """Rows in module-tree order (depth first), each root (depth 0) before its submodules."""

    rows: list[ModuleRow]
    calls: int
    """Calls of the workload (one per batch)."""
    workload_ms: float
    """Their total time, hooks included. Shares are of the models' own time (the roots' rows)."""

    @classmethod
    def from_timings(cls, timings: list[ModuleTiming], calls: int, workload_s: float) -> InspectReport:
        total = sum(t.total_s for t in timings if t.depth == 0)
        rows = [
            ModuleRow(
                t.path,
                t.type_name,
                t.depth,
                t.calls,
                t.total_s * 1e3,
                t.total_s / total if total > 0 else 0.0,
                t.parameters,
                len(t.keys),
                t.unkeyed,
            )
            for t in timings
            if t.calls
        ]
        return cls(rows, calls, workload_s * 1e3)

    def suggest(self, max_modules: int = 4) -> list[str]:
        """The paths to wrap, for :func:`aitune_core.wrap`; empty when the whole model should be wrapped."""
        candidates = sorted(
            (row for row in self.rows if row.depth > 0 and row.share >= MIN_SHARE and not row.note),
            key=lambda row: (-round(row.share, 2), row.graphs, row.depth),
        )
        picked: list[ModuleRow] = []
        covered = 0.0
        for row in candidates:
            if covered >= COVERAGE or len(picked) >= max_modules:
                break
            if any(overlaps(row.path, other.path) for other in picked):
                continue
            picked.append(row)
            covered += row.share
        return [row.path for row in picked] if covered >= WHOLE_MODEL else []

    def table(self) -> str:
        suggested = set(self.suggest())
        rows = [
            [
                "  " * row.depth + (row.path or "(root)"),
                row.type,
                row.calls,
                f"{row.total_ms:.2f}",
                f"{100 * row.share:.1f}%",
                f"{row.parameters:,}",
                row.graphs if not row.note else "?",
                "wrap" if row.path in suggested else "",
            ]
            for row in self.rows
        ]
        headers = ["Module", "Type", "Calls", "Total (ms)", "Share", "Params", "Graphs", "Suggested"]
        text = render_table(rows, headers, "simple")
        if suggested:
            text += f"\n\nSuggested: aitune_core.wrap(model, {sorted(suggested)!r})"
        elif self.rows:
            text += "\n\nSuggested: the whole model, aitune_core.Module(model, name): no submodule holds most time"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "workload_ms": self.workload_ms,
            "modules": [attrs.asdict(row) for row in self.rows],
            "suggested": self.suggest(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        return self.table()
