"""The tuning report: every candidate of every graph, how it fared, and the winners."""

from __future__ import annotations

from typing import Any

import attrs

from aitune_core.metadata.tables import render_table
from aitune_core.strategies.candidates import CandidateResult

SUMMARY_HEADERS = [
    "Module",
    "Graph",
    "Backend",
    "Status",
    "Throughput (samples/s)",
    "Latency p50/p90 (ms)",
    "Batch",
    "Speedup vs eager",
    "Reason",
]
WORKER_HEADER = "Worker"
"""Shown after "Status" when any candidate ran outside this process: which worker ran it."""


@attrs.define(eq=False)
class GraphReport:
    module: str
    graph: str
    strategy: str
    candidates: list[CandidateResult]
    eager_throughput: float | None = None

    @property
    def selected(self) -> CandidateResult | None:
        for candidate in self.candidates:
            if candidate.status in ("selected", "fallback"):
                return candidate
        return None


@attrs.define(eq=False)
class TuneReport:
    """What ``tune`` did. ``print(report)`` shows the summary table."""

    graphs: list[GraphReport] = attrs.field(factory=list)
    timings: dict[str, float] = attrs.field(factory=dict)
    dry_run: bool = False
    plan: list[str] = attrs.field(factory=list)

    def selected(self, module: str, graph: str = "0") -> str | None:
        for report in self.graphs:
            if report.module == module and report.graph == graph and report.selected is not None:
                return report.selected.backend
        return None

    @property
    def has_workers(self) -> bool:
        """Whether any candidate ran outside this process (the summary then names its worker)."""
        return any(candidate.worker for report in self.graphs for candidate in report.candidates)

    def headers(self) -> list[str]:
        if not self.has_workers:
            return list(SUMMARY_HEADERS)
        at = SUMMARY_HEADERS.index("Status") + 1
        return [*SUMMARY_HEADERS[:at], WORKER_HEADER, *SUMMARY_HEADERS[at:]]

    def rows(self) -> list[list[Any]]:
        rows = []
        workers = self.has_workers
        for report in self.graphs:
            for candidate in report.candidates:
                measurement = candidate.measurement
                status = f"✓ {candidate.status}" if candidate.status in ("selected", "fallback") else candidate.status
                row = [
                    report.module,
                    report.graph,
                    candidate.backend,
                    status,
                    f"{measurement.throughput:.2f}" if measurement else "-",
                    f"{measurement.median_ms:.3f} / {measurement.p90_ms:.3f}" if measurement else "-",
                    measurement.batch_size if measurement else "-",
                    f"{candidate.speedup:.2f}x" if candidate.speedup else "-",
                    _short(_reason(candidate)),
                ]
                if workers:
                    row.insert(4, candidate.worker or "here")
                rows.append(row)
        return rows

    def summary(self) -> str:
        if self.dry_run:
            return "Dry run, nothing was built. Plan:\n" + "\n".join(self.plan)
        text = render_table(self.rows(), self.headers(), "fancy_grid")
        for report in self.graphs:
            sweep = _sweep_table(report)
            if sweep:
                text += (
                    f"\nThroughput by batch size (samples/s), module `{report.module}` graph {report.graph}:\n{sweep}"
                )
        if self.timings:
            parts = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.timings.items())
            text += f"\nTime: {parts}"
        return text

    def __str__(self) -> str:
        return self.summary()


def _reason(candidate: CandidateResult) -> str:
    reason = candidate.reason
    if candidate.status == "selected" and candidate.eager_up_to is not None:
        reason = f"eager serves batch <= {candidate.eager_up_to}, where it measured faster"
    if candidate.status == "skipped" or not is_lossy(candidate):
        return reason
    # First, so that truncating a long reason never hides that the numbers differ.
    note = lossy_note(candidate)
    return f"{note}; {reason}" if reason else note


def is_lossy(candidate: CandidateResult) -> bool:
    """Whether the candidate's backend changes the numbers on purpose (``Backend.lossy``)."""
    backend = candidate.instance or candidate.blueprint
    return backend is not None and backend.lossy


def lossy_note(candidate: CandidateResult) -> str:
    """``lossy: max abs error 0.0029, max rel error 0.012``: how far from eager it measured."""
    if candidate.max_abs_error is None or candidate.stage == "validation":
        return "lossy"  # not compared with eager, or the rejection reason already gives the error
    text = f"lossy: max abs error {candidate.max_abs_error:.3g}"
    if candidate.max_rel_error is not None:
        text += f", max rel error {candidate.max_rel_error:.3g}"
    return text


def _sweep_table(report: GraphReport) -> str:
    measured = [c for c in report.candidates if len(c.sweep) > 1]
    if not measured:
        return ""
    sizes = sorted({m.batch_size for c in measured for m in c.sweep})
    rows = []
    for candidate in measured:
        by_size = {m.batch_size: m.throughput for m in candidate.sweep}
        rows.append([candidate.backend, *(f"{by_size[s]:.1f}" if s in by_size else "-" for s in sizes)])
    return render_table(rows, ["Backend", *(str(s) for s in sizes)], "simple")


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
