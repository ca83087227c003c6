"""ModuleGuard: the user's module leaves every tuning step as it entered it.

Tuning hands the user's module to backends (``BuildContext.module``) and calls it.
A backend that edits it (scales weights in place, folds BatchNorm into a convolution,
swaps a Parameter, calls ``.train()``) would otherwise pass validation, since eager is
then computed from the edited module too, and would leave the model wrong for every
later eager call, the fallback included. So each step of a candidate (build,
validation, profile, activate, deactivate, deploy) runs inside :meth:`ModuleGuard.step`:

* before the step, a :class:`~aitune_core.guard.snapshot.ModuleSnapshot` (no tensor data read);
* after it, whether it returned or raised, the snapshot is compared and the values are
  compared with a :class:`~aitune_core.guard.weights.WeightCopy` made once, lazily;
* anything changed is put back (modes, the very Parameter and submodule objects, and
  the values) and the step fails with :class:`ModuleChangedError` naming each change.

Only tuning steps are guarded; routed calls after tuning never see the guard.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from torch import nn

from aitune_core.guard.snapshot import ModuleSnapshot, TrackedTensor
from aitune_core.guard.weights import WeightCopy

_MAX_LISTED = 8


class ModuleChangedError(RuntimeError):
    """A tuning step changed the user's module; it has been put back as it was.

    step: the step that changed it. changes: each change, in words.
    """

    def __init__(self, step: str, changes: list[str]) -> None:
        listed = changes[:_MAX_LISTED]
        if len(changes) > _MAX_LISTED:
            listed.append(f"and {len(changes) - _MAX_LISTED} more")
        super().__init__(f"changed the user's module during {step}: {'; '.join(listed)}")
        self.step = step
        self.changes = list(changes)


class ModuleRestoreError(RuntimeError):
    """A step wrote the user's weights and there is no copy to undo it with: tuning must stop."""


class ModuleGuard:
    """Checks and restores ``module`` around each tuning step; ``name`` prefixes the paths it reports.

    Its CPU copy of the weights is made at the first step and kept until :meth:`release`.
    Should there be no memory for it, modes and replaced objects are still put back, but
    a step that writes weights stops the tuning (:class:`ModuleRestoreError`), since
    nothing could undo it.
    """

    def __init__(self, module: nn.Module, name: str, log: Any = None) -> None:
        self.module = module
        self.name = name
        self.log = log
        self.copy: WeightCopy | None = None
        self.copy_error = ""
        self.changed_steps: list[str] = []
        """The steps that changed the module so far, in order."""

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        """Run one step; raises :class:`ModuleChangedError` after it if it changed the module.

        A step that raised and changed the module raises ModuleChangedError from its own
        error; a KeyboardInterrupt or SystemExit is re-raised as it is, after the restore.
        """
        self._ensure_copy()
        before = ModuleSnapshot(self.module, self.name)
        try:
            yield
        except BaseException as error:
            changes = self._check_and_restore(before, step)
            if changes and isinstance(error, Exception):
                raise ModuleChangedError(step, changes) from error
            raise
        changes = self._check_and_restore(before, step)
        if changes:
            raise ModuleChangedError(step, changes)

    def release(self) -> None:
        """Drop the copy of the weights (the module's tuning is over)."""
        self.copy = None

    # ------------------------------------------------------------------ internals
    def _ensure_copy(self) -> None:
        if self.copy is not None or self.copy_error:
            return
        try:
            self.copy = WeightCopy(ModuleSnapshot(self.module, self.name))
        except (RuntimeError, MemoryError) as error:
            self.copy_error = f"{type(error).__name__}: {error}"
            if self.log is not None:
                self.log.warning(
                    "no copy of the module's weights could be kept",
                    reason=self.copy_error,
                    consequence="a candidate that writes the weights stops the tuning, since it cannot be undone",
                )
            return
        if self.log is not None:
            self.log.info(
                "copy of the module's weights kept to undo candidates' edits",
                mb=round(self.copy.nbytes / 2**20, 2),
                duration_s=round(self.copy.duration_s, 4),
            )

    def _check_and_restore(self, before: ModuleSnapshot, step: str) -> list[str]:
        start = time.perf_counter()
        changes, touched = before.changes()
        for tracked in self._differing(before, touched):
            changes.append(f"{tracked.path} was overwritten through .data (its version counter did not move)")
            touched.append(tracked)
        if not changes:
            return []
        self.changed_steps.append(step)
        before.restore_structure()
        lost = [t.path for t in touched if self.copy is None or not self.copy.restore(t.tensor)]
        if lost:
            why = f"no copy of the weights was kept ({self.copy_error})" if self.copy_error else "no copy of them"
            raise ModuleRestoreError(
                f"changed the user's module during {step} ({'; '.join(changes)}) and {', '.join(lost)} "
                f"could not be put back: {why}. Reload the model's weights before using it"
            )
        if self.log is not None:
            self.log.warning(
                "the user's module was changed and put back",
                step=step,
                changes="; ".join(changes),
                duration_s=round(time.perf_counter() - start, 4),
            )
        return changes

    def _differing(self, before: ModuleSnapshot, touched: list[TrackedTensor]) -> list[TrackedTensor]:
        if self.copy is None:
            return []
        seen = {id(t) for t in touched}
        return [t for t in before.tensors.values() if id(t) not in seen and self.copy.values_differ(t)]
