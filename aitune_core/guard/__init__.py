"""Keeping the user's module as tuning found it.

:class:`ModuleGuard` runs around every candidate step (build, validation, profile,
activate, deactivate, deploy), wherever the candidate runs, and turns a change to the
module into a failed candidate after putting the module back. :mod:`.modes` keeps
``tune()`` away from modules in training mode and returns every module in the mode
it was given.
"""

from aitune_core.guard.guard import ModuleChangedError, ModuleGuard, ModuleRestoreError
from aitune_core.guard.modes import TrainingModeError, TrainingModes, refusing_training, training_paths
from aitune_core.guard.snapshot import ModuleSnapshot
from aitune_core.guard.weights import WeightCopy

__all__ = [
    "ModuleChangedError",
    "ModuleGuard",
    "ModuleRestoreError",
    "ModuleSnapshot",
    "TrainingModeError",
    "TrainingModes",
    "WeightCopy",
    "refusing_training",
    "training_paths",
]
