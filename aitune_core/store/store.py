"""The store's folder: look entries up, write them atomically, and keep it under its size cap.

Layout, under ``<config.cache_dir>/store`` (a private folder, see :mod:`.trust`)::

    secret                      the signing secret of this store
    entries/<ab>/<key>/         one entry per key (see :mod:`.entry`), plus ``used``,
                                whose modification time is when it was last used
    staging/<pid>-<random>/     entries being written
    reading/<key>.<pid>-<rnd>   a process reading the entry ``key`` now: never evicted meanwhile

An entry is written into ``staging`` and renamed into ``entries`` in one step, so a
reader sees a complete entry or none, and a run killed while writing leaves only a
staging folder, which the next prune removes once its process is gone. Two runs that
store the same key race harmlessly: the first rename wins, the second is dropped.

An entry that cannot be used (unreadable, foreign, a file changed) is refused with the
reason logged and removed, and the candidate is built as if it were not there; the new
build then takes its place. After each new entry, entries used longest ago are removed
until the store fits its own cap (``config.store_max_mb`` when set), and then the whole
cache is kept under ``config.cache_max_mb`` (:mod:`.eviction`), each removal logged.

A full disk while an entry is written leaves only the staging folder, which is removed
at once: the entry is not stored (a warning says which folder is full and what to do),
the candidate still serves, and nothing half written is ever listed or read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from aitune_core.backends.artifacts import ArtifactSeal
from aitune_core.backends.base import Backend
from aitune_core.backends.build_folders import disk_full_reason
from aitune_core.config import config
from aitune_core.processes import pid_alive
from aitune_core.store.entry import BadEntryError, EntryRecord, read_entry, restore_entry, write_entry
from aitune_core.store.eviction import MIB, tidy
from aitune_core.store.folders import fsync_tree, new_private_folder, remove_aside
from aitune_core.store.trust import ForeignEntryError, private_folder, secret
from aitune_core.store.usage import READING, STORE

ENTRIES = "entries"
STAGING = "staging"
USED = "used"


@attrs.frozen
class Listed:
    """One entry as ``aitune cache list`` shows it; ``record`` is None for an entry that does not read."""

    key: str
    folder: Path
    record: EntryRecord | None
    size: int
    last_used: float
    problem: str = ""


@attrs.define(eq=False)
class ArtifactStore:
    """The store at ``root`` (``<cache>/store``), in a cache folder kept under ``cache_max_bytes``.

    max_bytes: a cap on the store alone (``config.store_max_mb``); None: none of its own.
    cache_max_bytes: the cap on the whole cache folder that holds ``root``, which entries
        share with everything else there (:mod:`.eviction`); None: not enforced here.
    """

    root: Path
    max_bytes: int | None = None
    cache_max_bytes: int | None = None

    @classmethod
    def from_config(cls) -> ArtifactStore | None:
        """The store ``config`` describes, or None when ``config.store`` is off."""
        if not config.store:
            return None
        return cls.of_config()

    @classmethod
    def of_config(cls) -> ArtifactStore:
        """The store in ``config.cache_dir`` with the configured caps, whether or not tuning uses it."""
        own_cap = None if config.store_max_mb is None else config.store_max_mb * MIB
        return cls(config.cache_dir.expanduser().absolute() / STORE, own_cap, config.cache_max_mb * MIB)

    def to_data(self) -> dict[str, Any]:
        """What a worker process needs to use this store (it may have another ``config``)."""
        return {"root": str(self.root), "max_bytes": self.max_bytes, "cache_max_bytes": self.cache_max_bytes}

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> ArtifactStore | None:
        if data is None:
            return None
        own_cap, cache_cap = data.get("max_bytes"), data.get("cache_max_bytes")
        return cls(
            Path(data["root"]),
            None if own_cap is None else int(own_cap),
            None if cache_cap is None else int(cache_cap),
        )

    def folder(self, key: str) -> Path:
        return self.root / ENTRIES / key[:2] / key

    # ------------------------------------------------------------------ reading
    def load(self, key: str, target: Path, log: Any) -> tuple[Backend, EntryRecord] | None:
        """The stored backend of ``key`` (CHECKPOINT_LOADED, artifacts copied into ``target``), or None.

        None when there is no entry, or when the entry is refused: then the reason is
        logged and the entry removed, so that the build that follows can store anew.
        """
        folder = self.folder(key)
        if not folder.is_dir():
            return None
        try:
            with self._reading(key):
                record = read_entry(folder, key, secret(self.root, create=False))
                backend = restore_entry(folder, record, target)
        except Exception as error:  # whatever is wrong with it, the candidate is built instead
            self.refuse(key, _reason(error, target), log)
            return None
        self.touch(key)
        return backend, record

    @contextlib.contextmanager
    def _reading(self, key: str) -> Iterator[None]:
        """Mark the entry of ``key`` as being read by this process, so that no eviction takes it meanwhile."""
        marker = None
        with contextlib.suppress(OSError):  # a store that cannot be marked is still read: eviction is then a race
            base = self.root / READING
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
            marker = base / f"{key}.{os.getpid()}-{secrets.token_hex(4)}"
            marker.touch()
        try:
            yield
        finally:
            if marker is not None:
                with contextlib.suppress(OSError):
                    marker.unlink()

    def refuse(self, key: str, reason: str, log: Any) -> None:
        log.warning("stored build refused; building it again", entry=key[:16], reason=reason)
        self.remove(key)

    def touch(self, key: str) -> None:
        """Mark the entry of ``key`` as used now (what eviction goes by)."""
        with contextlib.suppress(OSError):
            (self.folder(key) / USED).touch()

    # ------------------------------------------------------------------ writing
    def put(
        self,
        key: str,
        parts: dict[str, Any],
        backend: Backend,
        validated: ArtifactSeal,
        where: tuple[str, str],
        log: Any,
    ) -> EntryRecord | None:
        """Store ``backend``, which passed with ``validated``, under ``key``; None when it was not stored.

        Never raises: a build that cannot be stored (a full disk, a race with another
        run storing the same key) is logged and tuning goes on.
        """
        final = self.folder(key)
        if final.exists():
            return None
        staging = None
        try:
            key_bytes = secret(private_folder(self.root), create=True)
            assert key_bytes is not None
            staging = new_private_folder(self.root / STAGING)
            record = write_entry(staging, key, parts, backend, validated, key_bytes, where)
            (staging / USED).touch()
            fsync_tree(staging)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, final)  # atomic: readers see the whole entry or nothing
            staging = None
        except Exception as error:  # the build served; only its storing failed
            if final.is_dir():  # another run stored the same build first
                return None
            log.warning("build not stored", backend=backend.describe(), reason=_reason(error, self.root))
            return None
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        log.info("build stored", backend=record.description, entry=key[:16], mb=round(record.size / MIB, 2))
        try:
            self.prune(log=log)
            if self.cache_max_bytes is not None:
                tidy(self.root.parent, self.cache_max_bytes, log)
        except Exception as error:  # the entry is stored; the cache is tidied next time
            log.warning("cache not tidied", folder=str(self.root.parent), reason=_reason(error, self.root.parent))
        return record

    # ------------------------------------------------------------------ keeping it small
    def entries(self) -> list[Listed]:
        """Every entry, least recently used first."""
        found = []
        base = self.root / ENTRIES
        for folder in sorted(base.glob("*/*")) if base.is_dir() else []:
            if not folder.is_dir():
                continue
            record, problem = None, ""
            try:
                record = read_entry(folder, folder.name, secret(self.root, create=False))
            except (BadEntryError, ForeignEntryError, OSError) as error:
                problem = _reason(error)
            found.append(Listed(folder.name, folder, record, _size(folder), _last_used(folder), problem))
        return sorted(found, key=lambda listed: (listed.last_used, listed.key))

    def size(self) -> int:
        return sum(listed.size for listed in self.entries())

    def prune(self, max_bytes: int | None = None, log: Any = None) -> list[Listed]:
        """Remove entries used longest ago until the store holds at most ``max_bytes``; return them.

        max_bytes: None takes the store's own cap, when it has one. Entries that do not
        read are removed first, whatever the size, and so are staging folders of runs that
        are gone. Entries another process is reading stay. Each removal is logged
        (``cache evicted``: what, its size, why).
        """
        cap = self.max_bytes if max_bytes is None else max_bytes
        self._clean_staging()
        reading = self._being_read()
        listed = [entry for entry in self.entries() if entry.key not in reading]
        removed = [(entry, f"unusable: {entry.problem}") for entry in listed if entry.record is None]
        kept = [entry for entry in listed if entry.record is not None]
        total = sum(entry.size for entry in kept)
        for entry in kept:
            if cap is None or total <= cap:
                break
            why = f"used longest ago, while the store held {total / MIB:.2f} MiB"
            removed.append((entry, f"{why}, over its own cap of {cap / MIB:.1f} MiB (config.store_max_mb)"))
            total -= entry.size
        for entry, why in removed:
            self.remove(entry.key)
            if log is not None:
                what = f"{STORE}/{ENTRIES}/{entry.key[:2]}/{entry.key}"
                log.info("cache evicted", what=what, size_mb=round(entry.size / MIB, 2), why=why)
        return [entry for entry, _ in removed]

    def _being_read(self) -> set[str]:
        """Keys of the entries a live process is reading now."""
        keys = set()
        base = self.root / READING
        for marker in base.iterdir() if base.is_dir() else []:
            key, _, owner = marker.name.partition(".")
            pid = owner.split("-", 1)[0]
            if pid.isdigit() and pid_alive(int(pid)):
                keys.add(key)
        return keys

    def remove(self, key: str) -> None:
        """Remove one entry: renamed out of ``entries`` first, so no reader sees it half removed."""
        remove_aside(self.folder(key), self.root / STAGING)

    def clear(self) -> int:
        """Remove every entry (and staging folder); return how many entries there were."""
        count = len(self.entries())
        for part in (ENTRIES, STAGING):
            shutil.rmtree(self.root / part, ignore_errors=True)
        return count

    def _clean_staging(self) -> None:
        base = self.root / STAGING
        for folder in base.iterdir() if base.is_dir() else []:
            pid = folder.name.split("-", 1)[0]
            if not pid.isdigit() or not pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


def _last_used(folder: Path) -> float:
    for path in (folder / USED, folder):
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return time.time()


def _reason(error: BaseException, folder: Path | None = None) -> str:
    if isinstance(error, (BadEntryError, ForeignEntryError)):
        return str(error)
    full = disk_full_reason(error, folder)
    return full if full is not None else f"{type(error).__name__}: {error}"
