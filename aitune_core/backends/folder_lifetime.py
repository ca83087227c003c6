"""How long a build folder lives: while something that serves from it does, then it is removed.

:func:`hold` ties a folder to an object (a build's context, a restored winner's); the
folder goes with the last of its holders, or when the strategy drops a candidate that
lost (:func:`let_go`). Folders are named and claimed in
:mod:`aitune_core.backends.build_folders`; what processes that are gone left behind is
removed by :mod:`aitune_core.store.eviction`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aitune_core.backends import build_folders
from aitune_core.backends.build_folders import BUILDS

_holders: dict[str, int] = {}
"""``folder -> how many live objects hold it`` (:func:`hold`)."""

_holds: weakref.WeakKeyDictionary[object, list[weakref.finalize[Any, Any]]] = weakref.WeakKeyDictionary()
"""``holder -> its holds``, so that :func:`let_go` can end them before the holder is collected."""

_tunes_running = 0
_lock = threading.Lock()


def hold(holder: object, folder: Path) -> None:
    """Keep ``folder`` while ``holder`` lives (a build's context, a restored winner's), then remove it.

    A folder held by several objects goes with the last of them. Finalizers also run at
    interpreter exit, so a process that ends normally leaves no build folder behind; one
    that is killed leaves folders named after its pid, which later runs remove. In a
    process that builds for another (:func:`~aitune_core.backends.build_folders.build_for`)
    nothing is tied: the owner cleans up.
    """
    if build_folders.building_for_another():
        return
    key = str(folder.expanduser().absolute())
    with _lock:
        _holders[key] = _holders.get(key, 0) + 1
        _holds.setdefault(holder, []).append(weakref.finalize(holder, _let_go, key, os.getpid()))


def let_go(holder: object) -> None:
    """Give up ``holder``'s folders now, as if it were gone: a candidate that lost, maybe in a reference cycle.

    Waiting for its collection cost a full ``gc.collect()`` per tune: 110 ms in a large heap.
    """
    with _lock:
        finalizers = _holds.pop(holder, [])
    for finalizer in finalizers:
        finalizer()  # runs once: the holder's own collection later does nothing


def hold_artifacts(holder: object, paths: Iterable[str | Path]) -> None:
    """Keep the build folders holding ``paths`` (a worker built them) while ``holder`` lives (the restored winner).

    Paths outside a ``builds/<identity>/<build>`` folder are left alone.
    """
    folders = {folder for folder in map(build_folder_of, paths) if folder is not None}
    for folder in sorted(folders):
        hold(holder, folder)


def build_folder_of(path: str | Path) -> Path | None:
    """The ``builds/<identity>/<build>`` folder that ``path`` is in, or None."""
    parts = Path(path).expanduser().absolute().parts
    for index in range(len(parts) - 3, -1, -1):
        if parts[index] == BUILDS:
            return Path(*parts[: index + 3])
    return None


def is_held(folder: Path) -> bool:
    """Whether a live object of this process holds ``folder`` (see :func:`hold`)."""
    with _lock:
        return _holders.get(str(folder.expanduser().absolute()), 0) > 0


def _let_go(key: str, pid: int) -> None:
    if os.getpid() != pid:  # a forked child inherited the finalizer: the folder is its parent's
        return
    with _lock:
        count = _holders.get(key, 0) - 1
        if count > 0:
            _holders[key] = count
            return
        _holders.pop(key, None)
    remove_build_folder(Path(key))


def remove_build_folder(folder: Path) -> None:
    """Remove a build folder, and its identity folder once that is empty."""
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # fails while another build of the same identity is there


def tune_started() -> None:
    """Count a ``tune()`` running in this process: until none is, its unheld build folders may still be wanted."""
    global _tunes_running
    with _lock:
        _tunes_running += 1


def tune_finished() -> bool:
    """Count a ``tune()`` as done; True when no other one still runs in this process."""
    global _tunes_running
    with _lock:
        _tunes_running = max(0, _tunes_running - 1)
        return _tunes_running == 0
