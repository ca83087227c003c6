"""What a search under an accuracy budget tried and chose: per-module sensitivity, the Pareto front, the final drop.

Every drop here is measured: the user's metric on what the whole pipeline returned for
the held-out data, against eager's outputs for the same inputs. Speedups are the
modules' own timings from tuning (each lossy winner against its module's lossless one,
at the largest batch compared), added up over the wrapped modules; the pipeline's own
time beyond them is not in it, so the summary calls them estimated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import attrs

from aitune_core.metadata.tables import render_table
from aitune_core.serialization import make_converter

TrialKind = Literal["baseline", "sensitivity", "combination"]

SENSITIVITY_HEADERS = ["Module", "Lossy backend", "Speedup vs lossless", "Drop alone", "Chosen", "Note"]
PARETO_HEADERS = ["Tried", "Lossy modules", "Est. speedup", "Drop", "Kept"]
NAMED_UP_TO = 2
"""Lists of more modules than this are shown as a count: the rows' labels and the Chosen column name them."""


@attrs.define
class SensitivityRow:
    """One wrapped module with a lossy candidate faster than its lossless winner."""

    module: str
    backends: list[str]
    speedup: float
    """The module's lossless winners' time over its lossy ones' (summed over its graphs)."""
    saved_ms: float
    """Milliseconds per call that the lossy backends save over the lossless ones."""
    drop: float | None = None
    """The metric's drop with only this module lossy; None when it was not measured."""
    chosen: bool = False
    note: str = ""


@attrs.define
class TrialPoint:
    """One configuration measured on the held-out data: which modules were lossy, its speed and its drop."""

    label: str
    modules: list[str]
    speedup: float
    drop: float
    kind: TrialKind
    kept: bool = False


@attrs.define
class AccuracyReport:
    """The accuracy part of ``tune``'s report (``report.accuracy``); ``print`` shows it."""

    metric: str
    max_drop: float
    data_note: str
    data_fingerprint: str
    baseline_drop: float | None = None
    """The drop of the lossless routes (compilers change the last bits too)."""
    final_drop: float | None = None
    """The drop of what serves now, measured on the held-out data."""
    chosen: list[str] = attrs.field(factory=list)
    sensitivities: list[SensitivityRow] = attrs.field(factory=list)
    trials: list[TrialPoint] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    """What the user must know: the budget fits nothing, the profiling cap stopped the search, ..."""

    @property
    def final_speedup(self) -> float:
        """Estimated speedup of the wrapped modules over the lossless routes, for what was chosen."""
        kept = [t for t in self.trials if t.kept]
        return kept[-1].speedup if kept else 1.0

    def pareto(self) -> list[TrialPoint]:
        """The trials no other beats on both speed and drop, fastest last."""
        front = [
            t
            for t in self.trials
            if not any(
                (o.speedup >= t.speedup and o.drop <= t.drop) and (o.speedup > t.speedup or o.drop < t.drop)
                for o in self.trials
            )
        ]
        return sorted(front, key=lambda t: (t.speedup, -t.drop))

    def to_dict(self) -> dict[str, Any]:
        """Everything in plain data (JSON-ready), the Pareto front included."""
        data: dict[str, Any] = _converter.unstructure(self)
        data["pareto"] = [_converter.unstructure(t) for t in self.pareto()]
        data["final_speedup"] = self.final_speedup
        return data

    def render(self) -> str:
        lines = [f"Accuracy budget: {self.metric} may drop by at most {self.max_drop:g}; held out: {self.data_note}"]
        if self.sensitivities:
            rows = [
                [
                    row.module,
                    ", ".join(row.backends),
                    f"{row.speedup:.2f}x",
                    "-" if row.drop is None else f"{row.drop:.4g}",
                    "✓" if row.chosen else "",
                    row.note,
                ]
                for row in self.sensitivities
            ]
            lines.append("Sensitivity, each module lossy alone (the others lossless):")
            lines.append(render_table(rows, SENSITIVITY_HEADERS, "fancy_grid"))
        if self.trials:
            rows = [
                [t.label, self._modules(t.modules), f"{t.speedup:.2f}x", f"{t.drop:.4g}", "✓" if t.kept else ""]
                for t in self.pareto()
            ]
            lines.append("Pareto front of what was tried (est. speedup of the wrapped modules over the lossless ones):")
            lines.append(render_table(rows, PARETO_HEADERS, "simple"))
        lines.extend(self.notes)
        lines.append(self.outcome())
        return "\n".join(lines)

    def outcome(self) -> str:
        """The one line that says what serves and what it cost."""
        drop = "not measured" if self.final_drop is None else f"{self.final_drop:.4g}"
        if not self.chosen:
            return f"Result: the lossless routes serve; held-out drop {drop} (budget {self.max_drop:g})"
        return (
            f"Result: lossy in {self._modules(self.chosen)}; held-out drop {drop} <= {self.max_drop:g} (budget), "
            f"est. {self.final_speedup:.2f}x the lossless routes' module time"
        )

    def _modules(self, modules: list[str]) -> str:
        """Module names, or how many of the modules with a lossy option they are when that is more readable."""
        if len(modules) <= NAMED_UP_TO:
            return ", ".join(modules) or "-"
        return f"{len(modules)} of the {len(self.sensitivities)} modules with a lossy option"

    def plot_pareto(self, path: str | Path) -> Path:
        """Draw every trial, speed against drop, with the front and the budget; needs matplotlib.

        Raises ModuleNotFoundError naming the package when matplotlib is not installed.
        """
        try:  # optional: imported only here, so that aitune-core never needs it
            from matplotlib.figure import Figure
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "report.plot_pareto needs matplotlib, which is not installed: pip install matplotlib"
            ) from error
        figure = Figure(figsize=(6, 4))
        axes = figure.subplots()
        for kind, marker in (("baseline", "s"), ("sensitivity", "x"), ("combination", "o")):
            points = [t for t in self.trials if t.kind == kind]
            if points:
                axes.scatter([t.drop for t in points], [t.speedup for t in points], marker=marker, label=kind)
        front = self.pareto()
        axes.plot([t.drop for t in front], [t.speedup for t in front], linestyle="--", label="Pareto front")
        axes.axvline(self.max_drop, color="red", linewidth=1, label=f"budget {self.max_drop:g}")
        drops = [t.drop for t in self.trials]
        axes.set_xlim(min(0.0, *drops), max(self.max_drop, *drops) * 1.15 or 1e-3)  # no drop left of 0 unless measured
        axes.set_xlabel(f"drop of {self.metric}")
        axes.set_ylabel("est. speedup over lossless")
        axes.legend()
        target = Path(path)
        figure.savefig(target)
        return target

    def __str__(self) -> str:
        return self.render()


_converter = make_converter()
