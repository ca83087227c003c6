"""Folder moves the store and the cache share: staging named after its writer, fsync, removal in one rename.

A folder that readers may open (a store entry, an export, a checkpoint) is removed by
renaming it first into a folder of its own under ``<aside>/<pid>-<random>``: the rename
is atomic, so a reader finds the whole folder or none, and a process killed while
deleting leaves a folder named after its pid, which the next sweep removes once that
process is gone (:mod:`.usage`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path

from aitune_core.backends.artifacts import copy_hashed, hash_file


def new_private_folder(base: Path) -> Path:
    """A new folder ``<base>/<pid>-<random>`` (mode 0700) that only this process writes."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = base / f"{os.getpid()}-{secrets.token_hex(6)}"
    folder.mkdir(mode=0o700)
    return folder


def link_or_copy_hashed(source: Path, target: Path) -> tuple[str, int]:
    """``source`` at ``target`` as a hard link (one copy of the bytes on disk), or copied; ``(sha256, size)`` of it.

    The hash is taken of the file at ``target`` once it is there, so what is recorded is
    what is stored. A file system without hard links (or another one) gets a copy.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        return copy_hashed(source, target)
    return hash_file(target)


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` and flush it to disk; raises OSError (a full disk) as it comes."""
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` to disk, so that a rename after it publishes whole files."""
    for path in [*folder.rglob("*"), folder]:
        with contextlib.suppress(OSError):
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)


def remove_aside(path: Path, aside: Path) -> bool:
    """Remove ``path`` (a folder or file) after moving it into a new folder under ``aside``; False when it was gone."""
    if not path.exists() and not path.is_symlink():
        return False
    try:
        holder = new_private_folder(aside)
    except OSError:
        holder = None
    if holder is not None:
        try:
            os.rename(path, holder / "removed")
        except FileNotFoundError:
            shutil.rmtree(holder, ignore_errors=True)
            return False
        except OSError:  # another file system, say: delete in place
            shutil.rmtree(holder, ignore_errors=True)
            holder = None
    if holder is None:
        _delete(path)
        return True
    shutil.rmtree(holder, ignore_errors=True)
    return True


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
