"""What a worker says about one candidate: its summary row itself, and the events it logged for it.

The row is the strategy's own :class:`~aitune_core.evaluate.candidate.CandidateResult`,
sent as JSON through the project's converter, never pickled; what only exists in the
worker's process (the live backend, the blueprint) stays there. The worker's events
are shown here as they were logged there, with ``worker=pid@host``, so the console
reads the same wherever a candidate ran. A worker that died before it answered leaves
a row made here (:meth:`Answer.failed`), at the stage the worker recorded last.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from aitune_core.evaluate.result import CandidateResult
from aitune_core.serialization import converter

_OURS = ("backend", "key", "blueprint")
"""Fields of the strategy's row that it made itself: an answer never replaces them."""
_EVENT_TAIL_LINES = 12
_MEMORY_MARKS = ("MemoryError", "out of memory", "can't allocate memory", "Cannot allocate memory", "bad_alloc")


@attrs.define(eq=False)
class Answer:
    """One candidate's row and the events its worker logged; ``fetch``: how to get its artifacts later."""

    result: CandidateResult
    events: list[dict[str, Any]] = attrs.field(factory=list)
    fetch: Any = None

    @classmethod
    def failed(cls, stage: str, reason: str, worker: str = "", log_tail: str = "") -> Answer:
        """A candidate whose worker could not answer (it died, timed out, never started)."""
        return cls(CandidateResult("", "failed", stage=stage, reason=reason, worker=worker, log_tail=log_tail))

    def to_json(self) -> str:
        return json.dumps({"result": _codec()[0](self.result), "events": self.events}, default=str)

    @classmethod
    def from_json(cls, text: str) -> Answer:
        data = json.loads(text)
        return cls(_codec()[1](data["result"], CandidateResult), data["events"])

    def fill(self, row: CandidateResult, log: Any) -> None:
        """Make the strategy's ``row`` this answer's, and show the worker's events here."""
        for field in attrs.fields(CandidateResult):
            if field.name not in _OURS:
                setattr(row, field.name, getattr(self.result, field.name))
        for event in self.events:
            fields = {k: v for k, v in event.items() if k not in ("event", "level", "log_level", "timestamp")}
            getattr(log, event.get("log_level", "info"))(event["event"], **fields)
        if not self.events and row.status == "failed":  # the worker could not say why: say it here
            tail = "\n".join(row.log_tail.splitlines()[-_EVENT_TAIL_LINES:])
            extra = {key: value for key, value in (("worker", row.worker), ("log_tail", tail)) if value}
            log.warning(f"{row.stage or 'start'} failed", reason=row.reason, **extra)


@functools.cache
def _codec() -> tuple[Callable[[CandidateResult], dict[str, Any]], Callable[[Any, Any], CandidateResult]]:
    """What only exists in the worker's process (the live backend, the blueprint) never travels."""
    worker_only: dict[str, Any] = {"instance": override(omit=True), "blueprint": override(omit=True)}
    return (
        make_dict_unstructure_fn(CandidateResult, converter(), **worker_only),
        make_dict_structure_fn(CandidateResult, converter(), **worker_only),
    )


def looks_out_of_memory(text: str) -> bool:
    return any(mark in text for mark in _MEMORY_MARKS)
