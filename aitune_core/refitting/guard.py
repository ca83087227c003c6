"""The module guard of a refit: a backend's writes to the user's weights are put back, the user's own are not.

Tuning owns the module while it runs, so its guard
(:class:`~aitune_core.guard.ModuleGuard`) puts back whatever changed during a candidate's
step. A refit runs while the user's code goes on, in the background most of all: a
training loop steps its optimizer, a policy update loads new weights. Those writes fire
hooks that touch the module's staleness watch (``load_state_dict`` hooks, the optimizer
step hooks of :mod:`aitune_core.module.optimizer_steps`), and the watch counts them. So
around each step this guard compares the count: unchanged, a change to the module was
the backend's, and it is put back and fails the step, as in tuning; changed, the user
wrote meanwhile, nothing is put back, and the attempt (whose snapshot sees the new
weights) starts again. The copy of the weights it restores from is made again once the
user has written, so that it never puts back values older than the user's.

Left open: a write that fires no hook (an in-place operation under ``no_grad``, a write
through ``.data``) made by the user's code while a refit step runs is taken for the
backend's and undone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from aitune_core.guard import ModuleGuard
from aitune_core.guard.snapshot import ModuleSnapshot
from aitune_core.module.staleness import Watch


class RefitGuard(ModuleGuard):
    """A :class:`ModuleGuard` that leaves the writes of the user's own code (those ``watch`` counted) alone."""

    def __init__(self, watch: Watch, module: Any, name: str, log: Any = None) -> None:
        super().__init__(module, name, log=log)
        self.watch = watch
        self.started = watch.touches
        """The watch's count when the guard was made: the user has written since when it moved."""
        self._copied_at = watch.touches
        self._step_started = watch.touches

    @property
    def user_wrote(self) -> bool:
        """Whether the user's code wrote the module (a hook fired) since this guard was made."""
        return self.watch.touches != self.started

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        touches = self.watch.touches
        if self.copy is not None and self._copied_at != touches:
            self.copy = None  # made before the user's write: it would put older values back
        if self.copy is None:
            self._copied_at = touches
        self._step_started = touches
        with super().step(step):
            yield

    def _check_and_restore(self, before: ModuleSnapshot, step: str) -> list[str]:
        if self.watch.touches != self._step_started:
            return []  # the user's code wrote meanwhile: the attempt sees it and starts again
        return super()._check_and_restore(before, step)
