"""The refit report: for every backend of every route, what took the new weights, how long it took, and why.

``print(report)`` shows the table, as ``print(tune_report)`` does after tuning; ``to_dict()``
gives the same as data.
"""

from __future__ import annotations

import textwrap
from typing import Any, Literal

import attrs

from aitune_core.metadata.tables import render_table

Outcome = Literal["refitted", "rebuilt", "eager"]
REFITTED: Outcome = "refitted"
"""The backend took the new weights itself (or runs the live ones) and passed validation."""
REBUILT: Outcome = "rebuilt"
"""The backend could not refit, or its refit failed: the same candidate was built again and passed validation."""
EAGER: Outcome = "eager"
"""Neither passed: the original module serves the range, and ``reason`` says why."""

CELL_WIDTH = 60
"""Long validation findings and reasons wrap within their cells."""
HEADERS = ["Module", "Graph", "Serves", "Backend", "Outcome", "Seconds", "Validation", "Reason"]


@attrs.define
class RouteRefit:
    """One backend of one route (the batch range it serves), after the refit.

    validation: what validation found for what serves now (checked points and error), or
        why it failed. reason: why the backend was not refitted in place (for "rebuilt"),
        or why nothing passed (for "eager"); empty for "refitted".
    """

    module: str
    graph: str
    serves: str
    backend: str
    outcome: Outcome
    seconds: float
    validation: str = ""
    reason: str = ""

    def row(self) -> list[str]:
        return [
            self.module,
            self.graph,
            self.serves,
            self.backend,
            self.outcome,
            f"{self.seconds:.2f}",
            textwrap.fill(self.validation, CELL_WIDTH),
            textwrap.fill(self.reason, CELL_WIDTH),
        ]


@attrs.define
class RefitReport:
    """What :func:`aitune_core.refit` (or a background refit) did to every route of the tuned modules.

    routes: one row per backend of every route, in the modules' and graphs' order.
    discarded: attempts thrown away because the weights changed while they ran (each then
        started again with the weights of that moment).
    background: whether it ran in the background (``config.on_weight_change = "refit"``).
    unchanged: modules and ranges that needed nothing (the original module serves them).
    """

    routes: list[RouteRefit] = attrs.field(factory=list)
    duration_s: float = 0.0
    discarded: int = 0
    background: bool = False
    unchanged: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        """Whether every backend serves again (refitted or rebuilt): no range went to the original module."""
        return all(row.outcome != EAGER for row in self.routes)

    def outcomes(self) -> dict[str, int]:
        """How many backends ended each way."""
        counts: dict[str, int] = {REFITTED: 0, REBUILT: 0, EAGER: 0}
        for row in self.routes:
            counts[row.outcome] += 1
        return counts

    def extend(self, other: RefitReport) -> None:
        """Add ``other``'s rows (another module's) to this report."""
        self.routes.extend(other.routes)
        self.unchanged.extend(other.unchanged)
        self.discarded += other.discarded
        self.duration_s += other.duration_s

    def summary(self) -> str:
        counts = ", ".join(f"{count} {outcome}" for outcome, count in self.outcomes().items() if count)
        where = "in the background" if self.background else "now"
        lines = [f"Refit {where} in {self.duration_s:.2f} s: {counts or 'nothing to refit'}"]
        if self.discarded:
            lines.append(f"{self.discarded} attempt(s) discarded: the weights changed while they ran")
        if self.routes:
            lines.append(render_table([row.row() for row in self.routes], HEADERS, "fancy_grid"))
        if self.unchanged:
            lines.append("Served by the original module, nothing to refit: " + "; ".join(self.unchanged))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)
