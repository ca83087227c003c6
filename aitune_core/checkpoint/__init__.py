"""Checkpoints: save tuned modules, load and deploy them elsewhere without tuning again."""

from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.manifest import FORMAT_VERSION, MIGRATIONS
from aitune_core.checkpoint.save import save
from aitune_core.errors import CheckpointError

__all__ = ["FORMAT_VERSION", "MIGRATIONS", "CheckpointError", "load", "save"]
