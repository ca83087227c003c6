"""Staging siblings of a checkpoint: their names, the atomic swap into place, and cleanup.

A save writes into ``.NAME.saving-<pid>-<hex>`` (``.zip`` appended for an archive) next
to the checkpoint ``NAME`` and then puts it in place:

* Nothing at ``NAME`` yet, or a file replacing a file: one ``rename(2)``, atomic on POSIX.
  A reader sees the old checkpoint or the new one, never a gap or a mix.
* A folder at ``NAME`` (or a folder replacing a file), on Linux: one
  ``renameat2(RENAME_EXCHANGE)``, which swaps the two names in a single atomic step
  (any pairing of file and folder). The old checkpoint then sits at the staging name,
  where it is removed. Readers again see the old or the new checkpoint, never a gap.
* Where that exchange is unsupported (other systems, or filesystems that reject the
  flag: EINVAL, ENOSYS, EXDEV, EOPNOTSUPP), two renames: the old checkpoint to
  ``.NAME.replaced-<pid>-<hex>``, then the new one to ``NAME``. Between them ``NAME``
  is missing: a concurrent reader there finds no checkpoint, and a save killed there
  leaves the old one only aside. :func:`recover` moves it back, and :func:`clean_stale`
  (run at the start of every save) calls it first, so a later save or load restores it.
  After any kill the checkpoint is therefore loadable once recovered; only the moment
  between the two renames of a live save is not covered.

A killed save leaves its staging siblings behind. Their names carry the writer's pid, so
:func:`clean_stale` removes exactly those whose process is gone and never touches a save
in progress. Names from older versions, without a pid (``.NAME.saving-1a2b3c4d``), count
as stale once nothing in them changed for :data:`UNOWNED_MAX_AGE_S`: a save that has not
written anything for an hour is taken to be dead. Pids are only meaningful on one host
and in one pid namespace: processes sharing a checkpoint folder across hosts or
containers can mistake a live writer elsewhere for a dead one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import re
import shutil
import stat
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

from aitune_core.checkpoint.manifest import MANIFEST_NAME
from aitune_core.log import get_logger
from aitune_core.processes import pid_alive

SAVING = "saving"
REPLACED = "replaced"
UNOWNED_MAX_AGE_S = 3600.0
"""How long a staging sibling without a pid must stay unchanged before it counts as stale."""

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276, "riscv64": 276}
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.EOPNOTSUPP, errno.ENOTSUP}


class ExchangeUnsupported(OSError):
    """This system or filesystem cannot swap two names atomically."""


def staging_path(target: Path, kind: str, suffix: str = "") -> Path:
    """A fresh sibling name for ``target`` that records this process as its owner."""
    return target.parent / f".{target.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"


def _pattern(target: Path) -> re.Pattern[str]:
    kinds = f"{SAVING}|{REPLACED}"
    return re.compile(rf"\.{re.escape(target.name)}\.(?:{kinds})-(?:(?P<pid>\d+)-)?[0-9a-f]+(?:\.zip)?")


def staging_siblings(target: Path) -> list[tuple[Path, int | None]]:
    """Every staging or set-aside sibling of ``target``, with its owner's pid when the name has one."""
    pattern = _pattern(target)
    found = []
    try:
        names = sorted(os.listdir(target.parent))
    except OSError:  # no parent folder yet, or one we cannot list: nothing of ours is there
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if match is not None:
            pid = match.group("pid")
            found.append((target.parent / name, int(pid) if pid is not None else None))
    return found


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        return _renameat2_syscall(libc, platform.machine())
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _renameat2_syscall(libc: ctypes.CDLL, machine: str) -> Callable[..., int] | None:
    """renameat2 through syscall(2), for a libc too old to export it (glibc < 2.28)."""
    number = _SYS_RENAMEAT2.get(machine.lower())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def call(old_dir: int, old: bytes, new_dir: int, new: bytes, flags: int) -> int:
        result: int = syscall(
            ctypes.c_long(number),
            ctypes.c_int(old_dir),
            ctypes.c_char_p(old),
            ctypes.c_int(new_dir),
            ctypes.c_char_p(new),
            ctypes.c_uint(flags),
        )
        return result

    return call


def exchange(first: Path, second: Path) -> None:
    """Swap the names ``first`` and ``second`` in one atomic step; both must exist.

    Raises ExchangeUnsupported where the system or filesystem has no such operation.
    """
    call = _renameat2()
    if call is None:
        raise ExchangeUnsupported(errno.ENOSYS, "renameat2(RENAME_EXCHANGE) is not available here")
    if call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        raise ExchangeUnsupported(code, os.strerror(code), str(first), None, str(second))
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def replace_via_aside(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` with two renames, for systems without :func:`exchange`.

    ``target`` is missing between the renames; :func:`recover` repairs a kill there.
    """
    aside = staging_path(target, REPLACED, ".zip" if source.is_file() else "")
    os.replace(target, aside)
    try:
        os.replace(source, target)
    except BaseException:
        if not _exists(target):
            os.replace(aside, target)
        else:  # another save put its checkpoint there meanwhile; ours is obsolete
            remove(aside)
        raise
    remove(aside)


def remove(path: Path) -> None:
    """Delete a file, link or folder tree at ``path``, whatever is there now; nothing if absent."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def fsync(path: Path) -> None:
    """Flush a file, or a folder's entries, to disk: a renamed checkpoint survives a power loss."""
    if os.name != "posix" and path.is_dir():
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def is_complete(path: Path) -> bool:
    """Whether ``path`` holds a whole checkpoint: a folder with its manifest, or a zip archive."""
    if path.is_dir():
        return (path / MANIFEST_NAME).is_file()
    return path.is_file() and zipfile.is_zipfile(path)


def recover(target: Path) -> Path | None:
    """Move back the checkpoint a killed save set aside, when nothing is at ``target``.

    Only set-aside siblings whose writer is gone are used: a live save between its two
    renames is left to finish. Returns the sibling moved back, or None.
    """
    if _exists(target):
        return None
    candidates = [
        path
        for path, pid in staging_siblings(target)
        if path.name.startswith(f".{target.name}.{REPLACED}-") and _is_stale(path, pid) and is_complete(path)
    ]
    # The most recently set aside is the checkpoint that was at `target` last.
    for path in sorted(candidates, key=_changed, reverse=True):
        try:
            _move_without_overwriting(path, target)
        except OSError as error:
            if _exists(target):
                return None
            if isinstance(error, FileNotFoundError):
                continue  # another process recovered or removed it first
            raise
        get_logger().warning("checkpoint restored from an interrupted save", path=str(target), moved_from=str(path))
        return path
    return None


def clean_stale(target: Path) -> list[Path]:
    """Remove the staging siblings of ``target`` left by saves that were killed; return them.

    Runs :func:`recover` first, so a checkpoint that only survives aside is moved back
    rather than deleted. Siblings of live processes and unrelated files are never touched.
    Cleanup is best effort: what cannot be removed is logged and left for a later call.
    """
    log = get_logger()
    try:
        recover(target)
        keep_aside = False
    except OSError as error:
        log.warning(
            "could not restore the checkpoint an interrupted save set aside", path=str(target), error=str(error)
        )
        keep_aside = True  # it may be the only copy left
    removed = []
    for path, pid in staging_siblings(target):
        if not _is_stale(path, pid) or (keep_aside and path.name.startswith(f".{target.name}.{REPLACED}-")):
            continue
        try:
            remove(path)
        except OSError as error:
            log.warning("could not remove staging left by an interrupted save", path=str(path), error=str(error))
        if not _exists(path):
            removed.append(path)
    if removed:
        log.info("removed staging left by interrupted saves", path=str(target), removed=[p.name for p in removed])
    return removed


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _changed(path: Path) -> float:
    try:
        return os.lstat(path).st_ctime
    except FileNotFoundError:
        return 0.0


def _is_stale(path: Path, pid: int | None) -> bool:
    if pid is None:
        return time.time() - _newest_change(path) > UNOWNED_MAX_AGE_S
    return not pid_alive(pid)


def _newest_change(path: Path) -> float:
    """The latest mtime in ``path``: a save still writing deep in its tree is not idle."""
    try:
        newest = os.lstat(path).st_mtime
    except FileNotFoundError:
        return time.time()
    if os.path.isdir(path) and not os.path.islink(path):
        for root, folders, files in os.walk(path):
            for name in folders + files:
                try:
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
                except FileNotFoundError:
                    continue
    return newest


def _move_without_overwriting(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` unless something appeared there meanwhile."""
    if os.path.isdir(source) and not os.path.islink(source):
        # A folder cannot be renamed over a file or a non-empty folder (the only kind a checkpoint is).
        os.rename(source, target)
        return
    try:
        os.link(source, target)  # fails with FileExistsError rather than replacing
    except FileExistsError:
        raise
    except OSError:  # no hard links on this filesystem: check, then rename
        if _exists(target):
            raise FileExistsError(errno.EEXIST, "a checkpoint appeared meanwhile", str(target)) from None
        os.rename(source, target)
        return
    os.unlink(source)
