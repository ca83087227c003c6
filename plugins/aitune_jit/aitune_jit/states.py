"""The JIT's state per module, as ``ait.jit.status()`` reports it."""

from __future__ import annotations

import enum

import attrs


class JitState(enum.Enum):
    RECORDING = "recording"
    """Calls run eagerly and are recorded, until enough are seen to tune."""
    TUNING = "tuning"
    """Candidates are built in the background; calls run eagerly, unrecorded."""
    TUNED = "tuned"
    """Routed to the winner (or to eager where nothing beat it)."""
    FAILED = "failed"
    """Not tuned; the original module serves, and ``detail`` says why."""


@attrs.frozen
class ModuleStatus:
    """One module's state. ``backends`` names the backend serving each graph, once tuned."""

    name: str
    path: str
    state: JitState
    detail: str = ""
    calls_recorded: int = 0
    backends: dict[str, str] = attrs.field(factory=dict)
    stored: str = ""
    """Where the result is stored (or was loaded from), once it is."""

    def __str__(self) -> str:
        text = f"{self.name}: {self.state.value}"
        if self.backends:
            text += " (" + ", ".join(f"graph {g}: {b}" for g, b in self.backends.items()) + ")"
        return text + (f": {self.detail}" if self.detail else "")
