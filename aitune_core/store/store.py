"""The store's folder: look entries up, write them atomically, and keep it under its size cap.

Layout, under ``<config.cache_dir>/store`` (a private folder, see :mod:`.trust`)::

    secret                      the signing secret of this store
    entries/<ab>/<key>/         one entry per key (see :mod:`.entry`), plus ``used``,
                                whose modification time is when it was last used
    staging/<pid>-<random>/     entries being written

An entry is written into ``staging`` and renamed into ``entries`` in one step, so a
reader sees a complete entry or none, and a run killed while writing leaves only a
staging folder, which the next prune removes once its process is gone. Two runs that
store the same key race harmlessly: the first rename wins, the second is dropped.

An entry that cannot be used (unreadable, foreign, a file changed) is refused with the
reason logged and removed, and the candidate is built as if it were not there; the new
build then takes its place. After each new entry, entries used longest ago are removed
until the store fits ``config.store_max_mb``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

import attrs

from aitune_core.backends.artifacts import ArtifactSeal
from aitune_core.backends.base import Backend
from aitune_core.config import config
from aitune_core.processes import pid_alive
from aitune_core.store.entry import BadEntryError, EntryRecord, read_entry, restore_entry, write_entry
from aitune_core.store.trust import ForeignEntryError, private_folder, secret

STORE = "store"
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
    """The store at ``root``, kept under ``max_bytes``."""

    root: Path
    max_bytes: int

    @classmethod
    def from_config(cls) -> ArtifactStore | None:
        """The store ``config`` describes, or None when ``config.store`` is off."""
        if not config.store:
            return None
        return cls(config.cache_dir.expanduser().absolute() / STORE, config.store_max_mb * 2**20)

    def to_data(self) -> dict[str, Any]:
        """What a worker process needs to use this store (it may have another ``config``)."""
        return {"root": str(self.root), "max_bytes": self.max_bytes}

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> ArtifactStore | None:
        return None if data is None else cls(Path(data["root"]), int(data["max_bytes"]))

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
            record = read_entry(folder, key, secret(self.root, create=False))
            backend = restore_entry(folder, record, target)
        except Exception as error:  # whatever is wrong with it, the candidate is built instead
            self.refuse(key, _reason(error), log)
            return None
        self.touch(key)
        return backend, record

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
            staging = _new_staging(self.root)
            record = write_entry(staging, key, parts, backend, validated, key_bytes, where)
            (staging / USED).touch()
            _fsync_tree(staging)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, final)  # atomic: readers see the whole entry or nothing
            staging = None
        except Exception as error:  # the build served; only its storing failed
            if final.is_dir():  # another run stored the same build first
                return None
            log.warning("build not stored", backend=backend.describe(), reason=_reason(error))
            return None
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        log.info("build stored", backend=record.description, entry=key[:16], mb=round(record.size / 2**20, 2))
        self.prune(log=log)
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

        Entries that do not read are removed first, whatever the size, and so are staging
        folders of runs that are gone.
        """
        cap = self.max_bytes if max_bytes is None else max_bytes
        self._clean_staging()
        listed = self.entries()
        removed = [entry for entry in listed if entry.record is None]
        kept = [entry for entry in listed if entry.record is not None]
        total = sum(entry.size for entry in kept)
        for entry in kept:
            if total <= cap:
                break
            removed.append(entry)
            total -= entry.size
        for entry in removed:
            self.remove(entry.key)
        if removed and log is not None:
            log.info(
                "store pruned", removed=len(removed), cap_mb=round(cap / 2**20, 1), kept_mb=round(total / 2**20, 1)
            )
        return removed

    def remove(self, key: str) -> None:
        """Remove one entry: renamed out of ``entries`` first, so no reader sees it half removed."""
        folder = self.folder(key)
        if not folder.exists():
            return
        try:
            aside = _new_staging(self.root)
            os.rename(folder, aside / "removed")
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            return
        shutil.rmtree(aside, ignore_errors=True)

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


def _new_staging(root: Path) -> Path:
    base = root / STAGING
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = base / f"{os.getpid()}-{secrets.token_hex(6)}"
    folder.mkdir(mode=0o700)
    return folder


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder]:
        with contextlib.suppress(OSError):
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)


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


def _reason(error: BaseException) -> str:
    if isinstance(error, (BadEntryError, ForeignEntryError)):
        return str(error)
    return f"{type(error).__name__}: {error}"
