"""Counting what Dynamo compiled during a build: graphs, graph breaks and recompiles.

A graph break splits the model into pieces that run with Python in between, and a
recompile means a call shape was not covered by what was compiled; both explain a
disappointing speedup, so the build report carries them. Dynamo keeps these numbers
in ``torch._dynamo.utils.counters`` (what its own tests and ``torch._dynamo.explain``
read); they are process-wide, so a watch reports differences from when it started.
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


class CompileWatch:
    """Compiles since :meth:`start`, and since the first call compiled (the recompiles)."""

    def __init__(self) -> None:
        self._start = CompileCounts.now()
        self._first: CompileCounts | None = None
        self._reasons = dict(_counters()["graph_break"])

    def first_call_done(self) -> None:
        self._first = CompileCounts.now()

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
        }
