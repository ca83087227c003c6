"""Counting what Dynamo compiled during a build: graphs, graph breaks and recompiles.

A graph break splits the model into pieces that run with Python in between, and a
recompile means a call shape was not covered by what was compiled; both explain a
disappointing speedup, so the build report carries them. Dynamo keeps these numbers
in ``torch._dynamo.utils.counters`` (what its own tests and ``torch._dynamo.explain``
read); they are process-wide, so a watch reports differences from when it started.
Why a recompile happened (the guard that failed) comes from Dynamo's compilation
metrics, where it keeps the latest compiles.
"""

from __future__ import annotations

from typing import Any

import attrs


def _counters() -> Any:
    from torch._dynamo.utils import counters

    return counters


@attrs.frozen
class CompileCounts:
    frames: int = 0
    graphs: int = 0
    graph_breaks: int = 0

    @classmethod
    def now(cls) -> CompileCounts:
        counters = _counters()
        return cls(
            frames=int(counters["frames"].get("total", 0)),
            graphs=int(counters["stats"].get("unique_graphs", 0)),
            graph_breaks=int(sum(counters["graph_break"].values())),
        )

    def __sub__(self, other: CompileCounts) -> CompileCounts:
        # A torch._dynamo.reset() elsewhere clears the counters; never report negatives.
        return CompileCounts(
            max(0, self.frames - other.frames),
            max(0, self.graphs - other.graphs),
            max(0, self.graph_breaks - other.graph_breaks),
        )


def _compilation_metrics() -> list[Any]:
    """Dynamo's records of its latest compiles (a bounded history); [] where torch keeps none."""
    try:
        from torch._dynamo.utils import get_compilation_metrics
    except ImportError:
        return []
    return get_compilation_metrics()


class CompileWatch:
    """Compiles since :meth:`start`, and since the first call compiled (the recompiles)."""

    def __init__(self) -> None:
        self._start = CompileCounts.now()
        self._first: CompileCounts | None = None
        self._reasons = dict(_counters()["graph_break"])
        self._last_metric: Any = None

    def first_call_done(self) -> None:
        self._first = CompileCounts.now()
        metrics = _compilation_metrics()
        self._last_metric = metrics[-1] if metrics else None

    def recompile_reasons(self) -> list[str]:
        """The guard failures behind the recompiles since the first call, first line each."""
        if self._first is None:
            return []
        metrics = _compilation_metrics()
        later = metrics
        for index, metric in enumerate(metrics):
            if metric is self._last_metric:
                later = metrics[index + 1 :]
        reasons = [str(getattr(metric, "recompile_reason", None) or "").strip() for metric in later]
        # "0/0: 2 <= x.size()[0] <= 8  # where torch made the guard ...": the guard is enough.
        return [reason.splitlines()[0].split("  #")[0].strip() for reason in reasons if reason]

    def report(self) -> dict[str, Any]:
        now = CompileCounts.now()
        since_start = now - self._start
        since_first = now - self._first if self._first is not None else CompileCounts()
        reasons = [
            reason.strip().splitlines()[0]
            for reason, count in _counters()["graph_break"].items()
            if count > self._reasons.get(reason, 0)
        ]
        return {
            "graphs": since_start.graphs,
            "graph_breaks": since_start.graph_breaks,
            "recompiles": since_first.frames,
            "break_reasons": reasons,
            "recompile_reasons": self.recompile_reasons() if since_first.frames else [],
        }
