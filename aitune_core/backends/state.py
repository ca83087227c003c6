"""The backend state machine of the tuning workflow.

INIT ─build→ ACTIVE ─deactivate→ INACTIVE ─activate→ ACTIVE ─deploy→ DEPLOYED
CHECKPOINT_LOADED ─activate→ ACTIVE, CHECKPOINT_LOADED ─deploy→ DEPLOYED
ACTIVE ─refit→ ACTIVE, DEPLOYED ─refit→ DEPLOYED (new weights, same state)

A build happens once; DEPLOYED is final. Anything else is refused with both states
named, because a backend driven out of order is a bug in a strategy, not something
to paper over.
"""

from __future__ import annotations

import enum


class BackendState(enum.Enum):
    INIT = "init"
    ACTIVE = "active"
    INACTIVE = "inactive"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    DEPLOYED = "deployed"


TRANSITIONS: dict[str, dict[BackendState, BackendState]] = {
    "build": {BackendState.INIT: BackendState.ACTIVE},
    "deactivate": {BackendState.ACTIVE: BackendState.INACTIVE},
    "activate": {
        BackendState.INACTIVE: BackendState.ACTIVE,
        BackendState.CHECKPOINT_LOADED: BackendState.ACTIVE,
    },
    "deploy": {
        BackendState.ACTIVE: BackendState.DEPLOYED,
        BackendState.CHECKPOINT_LOADED: BackendState.DEPLOYED,
    },
    "refit": {
        BackendState.ACTIVE: BackendState.ACTIVE,
        BackendState.DEPLOYED: BackendState.DEPLOYED,
    },
}


STEP_TARGET = {step: next(iter(moves.values())) for step, moves in TRANSITIONS.items()}


class IllegalStateTransitionError(RuntimeError):
    """A lifecycle step was asked of a backend in a state that does not allow it."""

    def __init__(self, backend: str, step: str, current: BackendState) -> None:
        self.step = step
        self.current = current
        self.target = STEP_TARGET[step]
        allowed = ", ".join(state.name for state in TRANSITIONS[step])
        super().__init__(
            f"{backend}: illegal state transition {current.name} -> {self.target.name} ({step}); "
            f"{step} is only allowed from {allowed}"
        )


def next_state(backend: str, step: str, current: BackendState) -> BackendState:
    target = TRANSITIONS[step].get(current)
    if target is None:
        raise IllegalStateTransitionError(backend, step, current)
    return target
