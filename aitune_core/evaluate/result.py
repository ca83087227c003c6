"""How one candidate fared on one graph: the row of the summary table, wherever it ran.

Executors fill it in (in this process, a child process or a cluster worker), strategies
choose from it, and the summary prints it, so that it is one type for all of them.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from aitune_core.backends.base import Backend
from aitune_core.profiling.measurement import Measurement
from aitune_core.profiling.stats import Speedup

Status = Literal["selected", "passed", "rejected", "failed", "skipped", "fallback"]


@attrs.define(eq=False)
class CandidateResult:
    """How one candidate fared on one graph; one row of the summary table."""

    backend: str
    status: Status
    stage: str = ""
    reason: str = ""
    note: str = ""
    """What the backend said about its build (``Backend.build_note``): a fallback it took."""
    key: str = ""
    build_s: float = 0.0
    validate_s: float = 0.0
    profile_s: float = 0.0
    measurement: Measurement | None = None
    sweep: list[Measurement] = attrs.field(factory=list)
    speedup: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    instance: Backend | None = attrs.field(default=None, repr=False)
    worker: str = ""
    """Where it ran (``pid@host``) when an executor ran it outside this process; empty in-process."""
    log_tail: str = attrs.field(default="", repr=False)
    """The end of the worker's log when the candidate failed out of process."""
    blueprint: Backend | None = attrs.field(default=None, repr=False)
    backend_data: dict[str, Any] | None = attrs.field(default=None, repr=False)
    """``to_dict()`` of the candidate as built out of process: what restores the winner here."""
    speedups: dict[int, Speedup] = attrs.field(factory=dict)
    """Its speedup over eager (with a confidence interval) at each batch size it was compared at."""
    serves: list[tuple[int | None, int | None]] = attrs.field(factory=list)
    """The batch ranges it serves once selected, ``(first, last)``; ``(None, None)``: every call."""
    reused: bool = False
    """Loaded from the artifact store instead of built (:mod:`aitune_core.store`); still validated and profiled."""

    def serves_batch(self, size: int) -> bool:
        return any(low is None or high is None or low <= size <= high for low, high in self.serves)

    def describe_serves(self) -> str:
        return ", ".join(describe_range(low, high) for low, high in self.serves)


def describe_range(low: int | None, high: int | None) -> str:
    """``"batch 1-4"``, ``"batch 8"``, or ``"every call"`` for a graph without a batch axis."""
    if low is None or high is None:
        return "every call"
    return f"batch {low}" if low == high else f"batch {low}-{high}"


class CandidateRejectedError(RuntimeError):
    """A candidate built but gave wrong outputs; ``result`` holds the reason and the error measured."""

    def __init__(self, result: CandidateResult) -> None:
        super().__init__(result.reason)
        self.result = result


class CandidateFailedError(RuntimeError):
    """A candidate run out of process failed; its original exception stayed there, ``result`` says why."""

    def __init__(self, result: CandidateResult) -> None:
        where = f" on {result.worker}" if result.worker else ""
        super().__init__(f"{result.backend} failed at {result.stage or 'start'}{where}: {result.reason}")
        self.result = result
