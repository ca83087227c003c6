"""What the cache folder holds, part by part, and which of it may go.

Everything aitune writes under ``config.cache_dir`` counts against ``config.cache_max_mb``.
Each part is cut into *units*, what is removed as one, and each unit is one of three
kinds: *evictable* (removed, least recently used first, when the cache is over its cap),
*in use* (never removed by another process), or *garbage* (removed whatever the cap)::

    part      unit                                   in use                  garbage
    store     store/entries/<ab>/<key>               read by a live process  -
              store/searches/<key>.json              -                       -
              store/staging/<pid>-<random>           its writer lives        its writer is gone
    builds    builds/<identity>/<pid>-<random>       its process lives       its process is gone
    exports   exports/<key>           (aitune-onnx)  -                       -
              exports/.<key>.<pid>-<random>          its writer lives        its writer is gone
    loaded    loaded/<kind>-<pid>-<random>           its process lives       its process is gone
    jit       jit/<checkpoint>        (aitune-jit)   ``.``-names: saved      -
    inductor  inductor/<record>  (aitune-inductor)   -                       -
    other     anything else                          always                  -

Units that are evictable are used again by reading them (an entry's ``used`` file is
touched when it is loaded; others count from when they were written). A build folder
is also where a cluster executor writes the artifacts it fetches from its workers
(``aitune-ray``): named after the driver's pid, they go as the driver's own builds do.
``other`` holds what aitune cannot tell the owner of (folders of older versions, such
as the fetched artifacts they kept under ``<module>/<graph>/builds``): it is counted
and shown, and removed only by hand. A folder whose name carries no pid (written by an
older aitune) counts as in use: that includes an export's pid-less ``.``-name, which
older versions wrote while exporting. Its writer cannot be told apart from one still
running on an older version, and no age bound fits every export (a large model
exports for many minutes), so it is left for ``aitune cache list`` to show; no new
ones are written, so what is left of them does not grow.

Sizes count each file once, however many hard links the cache holds to it (ONNX
exports are hard-linked into build folders), so evicting a unit frees only the bytes
no other path still holds.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import attrs

from aitune_core.backends.build_folders import BUILDS, folder_owner
from aitune_core.backends.folder_lifetime import is_held
from aitune_core.processes import pid_alive

STORE = "store"
EXPORTS = "exports"
LOADED = "loaded"
JIT = "jit"
INDUCTOR = "inductor"
OTHER = "other"
REMOVING = ".removing"
"""``<cache>/.removing/<pid>-<random>``: units being deleted, moved out of sight first."""

PARTS = (STORE, BUILDS, EXPORTS, LOADED, JIT, INDUCTOR, OTHER)
READING = "reading"
"""``store/reading/<key>.<pid>-<random>``: a process reading the entry ``key`` right now."""

Status = Literal["evictable", "in use", "garbage"]
Inode = tuple[int, int]

_LOADED_NAME = re.compile(r"^[a-z]+-(\d+)-")
_WRITING_NAME = re.compile(r"^\.[^.]+\.(\d+)-")
"""``.<key>.<pid>-<random>``: a unit its writer is putting together (or removing) under a name of its own."""


@attrs.frozen
class Unit:
    """What is removed as one: a folder (or file) of one part, its files, and why it may go or must stay."""

    part: str
    path: Path
    status: Status
    last_used: float = 0.0
    why: str = ""
    files: tuple[tuple[Inode, int], ...] = ()


@attrs.define
class Usage:
    """The cache at ``root``: its units, and every file's size once (``sizes``) with how many paths hold it."""

    root: Path
    units: list[Unit] = attrs.field(factory=list)
    sizes: dict[Inode, int] = attrs.field(factory=dict)
    links: dict[Inode, int] = attrs.field(factory=dict)
    part_files: dict[str, set[Inode]] = attrs.field(factory=dict)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    def part_size(self, part: str) -> int:
        return sum(self.sizes.get(inode, 0) for inode in self.part_files.get(part, ()))

    def of(self, status: Status) -> list[Unit]:
        return [unit for unit in self.units if unit.status == status]

    def drop(self, unit: Unit) -> int:
        """Forget ``unit`` (it was removed); the bytes that freed: files no other path holds."""
        freed = 0
        for inode, size in unit.files:
            left = self.links.get(inode, 1) - 1
            if left > 0:
                self.links[inode] = left
                continue
            self.links.pop(inode, None)
            if self.sizes.pop(inode, None) is not None:
                freed += size
            self.part_files.get(unit.part, set()).discard(inode)
        if unit in self.units:
            self.units.remove(unit)
        return freed

    def count(self, part: str, files: list[tuple[Inode, int]]) -> None:
        for inode, size in files:
            self.sizes[inode] = size
            self.links[inode] = self.links.get(inode, 0) + 1
            self.part_files.setdefault(part, set()).add(inode)


def scan(root: Path, own_unheld: bool = False) -> Usage:
    """Every part of the cache at ``root``, sized and cut into units.

    own_unheld: build folders of this process that nothing of it holds any more are
        garbage too (only once no ``tune()`` runs here, see :mod:`.eviction`).
    """
    usage = Usage(root)
    if not root.is_dir():
        return usage
    for top in sorted(_children(root)):
        units = list(_units_of(top, own_unheld))
        for unit in units:
            files = _files(unit.path)
            usage.count(unit.part, files)
            usage.units.append(attrs.evolve(unit, files=tuple(files)))
        part = _part_of(top)
        covered = {unit.path for unit in units}
        usage.count(part, _files(top, skip=covered))
    return usage


def _part_of(top: Path) -> str:
    name = top.name
    return name if name in PARTS and name != OTHER and top.is_dir() else OTHER


def _units_of(top: Path, own_unheld: bool) -> Iterator[Unit]:
    part = _part_of(top)
    if top.name == REMOVING:
        for child in _children(top):
            yield _owned(OTHER, child, folder_owner(child.name), "being removed")
    elif part == STORE:
        yield from _store_units(top)
    elif part == BUILDS:
        yield from _build_units(top, own_unheld)
    elif part == LOADED:
        for child in _children(top):
            yield _owned(LOADED, child, _loaded_owner(child), "deployed from a checkpoint")
    elif part in (EXPORTS, JIT, INDUCTOR):
        for child in _children(top):
            if part == EXPORTS and child.name.startswith("."):
                yield _owned(EXPORTS, child, _writer(child), "being written or removed")
            elif child.name.startswith("."):
                yield Unit(part, child, "in use", why="being written or removed")
            else:
                yield Unit(part, child, "evictable", last_used=_last_written(child))
    else:
        yield Unit(OTHER, top, "in use", why="not written by a part of aitune that sizes it; remove it by hand")


def _store_units(store: Path) -> Iterator[Unit]:
    reading: set[str] = set()
    for marker in _children(store / READING):
        key, _, owner = marker.name.partition(".")
        pid = folder_owner(owner)
        if pid is not None and pid_alive(pid):
            reading.add(key)
        else:
            yield Unit(STORE, marker, "garbage", why=f"its reader (pid {pid}) is gone")
    for bucket in _children(store / "entries"):
        for entry in _children(bucket):
            if entry.name in reading:
                yield Unit(STORE, entry, "in use", why="being read")
            else:
                yield Unit(STORE, entry, "evictable", last_used=_mtime(entry / "used", entry))
    for staging in _children(store / "staging"):
        yield _owned(STORE, staging, folder_owner(staging.name), "being written")
    for search in _children(store / "searches"):
        if search.name.startswith("."):
            yield _owned(STORE, search, folder_owner(search.name[1:]), "being written")
        else:
            yield Unit(STORE, search, "evictable", last_used=_mtime(search, search))


def _build_units(builds: Path, own_unheld: bool) -> Iterator[Unit]:
    own = os.getpid()
    for identity in _children(builds):
        folders = _children(identity)
        if not folders and identity.is_dir():
            yield Unit(BUILDS, identity, "garbage", why="empty")
            continue
        for folder in folders:
            pid = folder_owner(folder.name)
            if own_unheld and pid == own and not is_held(folder):
                yield Unit(BUILDS, folder, "garbage", why="its tune is done and nothing serves from it")
            else:
                yield _owned(BUILDS, folder, pid, "built")


def _owned(part: str, path: Path, pid: int | None, doing: str) -> Unit:
    """A unit named after a process: in use while it lives, garbage once it is gone (no pid: in use)."""
    if pid is None:
        return Unit(part, path, "in use", why="no process in its name (written by an older aitune)")
    if pid_alive(pid):
        return Unit(part, path, "in use", why=f"{doing} by a running process (pid {pid})")
    return Unit(part, path, "garbage", why=f"its process (pid {pid}) is gone")


def _writer(path: Path) -> int | None:
    found = _WRITING_NAME.match(path.name)
    return int(found.group(1)) if found else None


def _loaded_owner(path: Path) -> int | None:
    found = _LOADED_NAME.match(path.name)
    return int(found.group(1)) if found else None


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _mtime(path: Path, fallback: Path) -> float:
    for candidate in (path, fallback):
        try:
            return candidate.lstat().st_mtime
        except OSError:
            continue
    return 0.0


def _last_written(path: Path) -> float:
    """The newest modification time of ``path`` and its direct children: when it was last written."""
    newest = _mtime(path, path)
    for child in _children(path) if path.is_dir() and not path.is_symlink() else []:
        newest = max(newest, _mtime(child, child))
    return newest


def _files(path: Path, skip: set[Path] | None = None) -> list[tuple[Inode, int]]:
    """``(inode, size)`` of every regular file under ``path`` (or of ``path``), links not followed."""
    skip = skip or set()
    if path in skip:
        return []
    try:
        info = path.lstat()
    except OSError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        return [((info.st_dev, info.st_ino), info.st_size)] if stat.S_ISREG(info.st_mode) else []
    found = []
    for folder, dirs, names in os.walk(path):
        base = Path(folder)
        dirs[:] = [name for name in dirs if base / name not in skip]
        for name in names:
            file = base / name
            if file in skip:
                continue
            try:
                info = file.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(((info.st_dev, info.st_ino), info.st_size))
    return found
