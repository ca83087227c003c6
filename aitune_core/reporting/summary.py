"""The tuning report: every candidate of every graph, how it fared, and the winners.

Every number of a graph comes from the same interleaved comparison, and every row is
shown at the same batch size (the largest compared), next to eager's number there, so
each speedup is the ratio of the two throughputs printed in its row and eager's row.
The table by batch size shows the rest, and marks which variant serves each size.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs

from aitune_core.evaluate.result import CandidateResult, describe_range
from aitune_core.metadata.tables import render_table
from aitune_core.profiling.budget import ProfilingBudget
from aitune_core.profiling.measurement import Measurement
from aitune_core.profiling.stats import Speedup
from aitune_core.reporting.accuracy import AccuracyReport
from aitune_core.reporting.partition_tree import PartitionNode, render_partition

SUMMARY_HEADERS = [
    "Module",
    "Graph",
    "Backend",
    "Status",
    "Serves",
    "Batch",
    "Throughput (samples/s)",
    "Latency p50/p90 (ms)",
    "Speedup vs eager [90% CI]",
    "Reason",
]
EAGER_ROW = "eager (reference)"
WORKER_HEADER = "Worker"
"""Shown after "Status" when any candidate ran outside this process: which worker ran it."""


@attrs.define(eq=False)
class GraphReport:
    module: str
    graph: str
    strategy: str
    candidates: list[CandidateResult]
    eager_sweep: list[Measurement] = attrs.field(factory=list)
    """Eager's measurements from the same comparisons as the candidates', one per batch size."""
    eager_serves: list[tuple[int | None, int | None]] = attrs.field(factory=list)
    """Batch ranges the original module serves next to the selected backends (no candidate beat it there)."""
    partition: list[PartitionNode] | None = None
    """The submodules serving the graph when it is partitioned (``tune(..., partition=True)``)."""

    @property
    def shown_batch(self) -> int | None:
        """The batch size every row of the main table is shown at: the largest compared."""
        return max((m.batch_size for m in self.eager_sweep), default=None)

    @property
    def selected(self) -> CandidateResult | None:
        """What serves the graph's largest batches (the only one, unless batch ranges are split)."""
        serving = [c for c in self.candidates if c.status in ("selected", "fallback")]
        if not serving:
            return None
        return max(
            serving, key=lambda c: max((h if h is not None else math.inf for _, h in c.serves), default=math.inf)
        )

    def serving_at(self, size: int) -> CandidateResult | None:
        """The selected candidate that serves batch ``size``; None where eager does."""
        return next((c for c in self.candidates if c.status == "selected" and c.serves_batch(size)), None)

    @property
    def serving(self) -> list[CandidateResult]:
        """Every row that serves a batch range, lowest range first."""
        rows = [c for c in self.candidates if c.status in ("selected", "fallback")]
        return sorted(rows, key=lambda c: min((lo if lo is not None else 0 for lo, _ in c.serves), default=0))


@attrs.define(eq=False)
class TuneReport:
    """What ``tune`` did. ``print(report)`` shows the summary table."""

    graphs: list[GraphReport] = attrs.field(factory=list)
    timings: dict[str, float] = attrs.field(factory=dict)
    dry_run: bool = False
    plan: list[str] = attrs.field(factory=list)
    partition: bool = False
    """Whether graphs that no compiled candidate took were partitioned (``tune(..., partition=True)``)."""
    profiling: ProfilingBudget | None = None
    """The tune's profiling cap and what the comparisons spent of it."""
    accuracy: AccuracyReport | None = None
    """What the search under ``tune(..., accuracy=...)`` measured and chose; None without a budget."""
    threads: int | None = None
    """The torch thread count every candidate was built, validated and timed at (``tune(..., threads=)``)."""

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
            batch = report.shown_batch
            if batch is not None:
                eager = _at(report.eager_sweep, batch)
                rows.append(_row(report, EAGER_ROW, "baseline", _eager_serves(report), eager, "-", "", workers, ""))
            for candidate in report.candidates:
                measurement = _at(candidate.sweep, batch) if batch is not None else candidate.measurement
                speedup = candidate.speedups.get(batch) if batch is not None else None
                status = f"✓ {candidate.status}" if candidate.status in ("selected", "fallback") else candidate.status
                rows.append(
                    _row(
                        report,
                        candidate.backend,
                        status,
                        candidate.describe_serves() or "-",
                        measurement,
                        speedup.describe() if speedup else "-",
                        _short(_reason(candidate)),
                        workers,
                        candidate.worker or "here",
                    )
                )
        return rows

    def summary(self) -> str:
        if self.dry_run:
            return "Dry run, nothing was built. Plan:\n" + "\n".join(self.plan)
        text = render_table(self.rows(), self.headers(), "fancy_grid")
        for report in self.graphs:
            sweep = _sweep_table(report)
            if sweep:
                text += (
                    f"\nThroughput by batch size (samples/s; speedup vs eager [90% CI]; * serves that size), "
                    f"module `{report.module}` graph {report.graph}:\n{sweep}"
                )
        for report in self.graphs:
            if report.partition:
                text += "\n" + render_partition(
                    f"module `{report.module}` graph {report.graph}: partitioned", report.partition
                )
        if self.timings:
            parts = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.timings.items())
            text += f"\nTime: {parts}"
        if self.threads is not None:
            text += f"\nMeasured at {self.threads} torch thread(s): serve at the same count (torch.set_num_threads)"
        if self.profiling is not None:
            text += f"\n{_profiling_line(self.profiling)}"
        if self.accuracy is not None:
            text += f"\n{self.accuracy.render()}"
        return text

    def plot_pareto(self, path: str | Path) -> Path:
        """The accuracy search's Pareto chart (:meth:`AccuracyReport.plot_pareto`) after ``tune(accuracy=...)``."""
        if self.accuracy is None:
            raise ValueError("no accuracy search ran: tune(..., accuracy=ait.AccuracyBudget(...)) makes one")
        return self.accuracy.plot_pareto(path)

    def __str__(self) -> str:
        return self.summary()


def _row(
    report: GraphReport,
    name: str,
    status: str,
    serves: str,
    measurement: Measurement | None,
    speedup: str,
    reason: str,
    workers: bool,
    worker: str,
) -> list[Any]:
    row = [
        report.module,
        report.graph,
        name,
        status,
        serves,
        measurement.batch_size if measurement else "-",
        f"{measurement.throughput:.2f}" if measurement else "-",
        f"{measurement.median_ms:.3f} / {measurement.p90_ms:.3f}" if measurement else "-",
        speedup,
        reason,
    ]
    if workers:
        row.insert(4, worker)
    return row


def _profiling_line(budget: ProfilingBudget) -> str:
    line = f"Profiling: {budget.describe()} of the cap (config.profile_cap_s)"
    if budget.capped:
        line += (
            f"; the cap cut {budget.capped} comparison{'s' if budget.capped != 1 else ''} short "
            "(raise config.profile_cap_s to measure until decided)"
        )
    return line


def _at(sweep: list[Measurement], batch: int) -> Measurement | None:
    return next((m for m in sweep if m.batch_size == batch), None)


def _eager_serves(report: GraphReport) -> str:
    return ", ".join(describe_range(low, high) for low, high in report.eager_serves) or "-"


def _winners(report: GraphReport) -> dict[int, CandidateResult | None]:
    """Which selected candidate serves each compared batch size (None: eager)."""
    return {measurement.batch_size: report.serving_at(measurement.batch_size) for measurement in report.eager_sweep}


REUSED_NOTE = "reused"
"""Leads the reason of a row whose build was loaded from the artifact store (``CandidateResult.reused``)."""


def _reason(candidate: CandidateResult) -> str:
    reason = "; ".join(part for part in (candidate.note, candidate.reason) if part)
    if candidate.reused:
        reason = f"{REUSED_NOTE}; {reason}" if reason else REUSED_NOTE
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
    """Every variant at every compared batch size; ``*`` marks what serves that size."""
    measured = [c for c in report.candidates if c.sweep]
    sizes = [m.batch_size for m in report.eager_sweep]
    if not measured or len(sizes) < 2:
        return ""
    winners = _winners(report)
    rows = [[EAGER_ROW, *(_cell(_at(report.eager_sweep, s), None, winners[s] is None) for s in sizes)]]
    for candidate in measured:
        rows.append(
            [
                candidate.backend,
                *(_cell(_at(candidate.sweep, s), candidate.speedups.get(s), winners[s] is candidate) for s in sizes),
            ]
        )
    return render_table(rows, ["Backend", *(f"batch {s}" for s in sizes)], "simple")


def _cell(measurement: Measurement | None, speedup: Speedup | None, serves: bool) -> str:
    if measurement is None:
        return "-"
    text = f"{measurement.throughput:.1f}"
    if speedup is not None:
        text += f" ({speedup.describe()})"
    return text + (" *" if serves else "")


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
