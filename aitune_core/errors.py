"""Errors that a backend plugin raises or catches, at the bottom of the core.

A backend author who raises :class:`CheckpointError` from a config check should load
what defines the error, not the checkpoint machinery that also raises it: the
machinery (save, load, their plans) pulls in the module wrapper, partitioning and
the strategies. Errors live here when a plugin needs them; the rest stay beside the
code that raises them.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the file or setting to fix."""
