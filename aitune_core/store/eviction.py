"""Keeping the whole cache under ``config.cache_max_mb``: garbage first, then least recently used.

:func:`tidy` removes every unit that is garbage (a folder of a process that is gone;
see :mod:`.usage` for the units), then, while the cache is over its cap, the evictable
unit used longest ago, across all parts: a store entry competes with an ONNX export and
a JIT checkpoint on when it was last used. What a running process uses is never
removed; when that alone is over the cap, a warning says so and what holds it. Every
removal is logged (``cache evicted`` or ``cache cleaned``, with what, its size and why).

It runs after each build is stored, at the start and the end of every ``tune()``
(:func:`tune_started`, :func:`tune_finished`: the end also removes the build folders of
this process that nothing serves from any more, once no other ``tune()`` runs here),
and by ``aitune cache prune`` and ``clear``.

Removals are single renames into ``<cache>/.removing`` before the files are deleted
(:func:`~.folders.remove_aside`): a reader sees a whole unit or none. Two processes
tidying at once may both remove something; neither removes what the other uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from aitune_core.backends import folder_lifetime
from aitune_core.config import config
from aitune_core.log import get_logger
from aitune_core.store.folders import remove_aside
from aitune_core.store.usage import BUILDS, REMOVING, Unit, Usage, scan

MIB = 2**20


@attrs.define
class Tidied:
    """What :func:`tidy` removed, and the cache as it left it."""

    removed: list[tuple[Unit, int]]
    usage: Usage

    @property
    def freed(self) -> int:
        return sum(size for _, size in self.removed)


def cache_root() -> Path:
    return config.cache_dir.expanduser().absolute()


def cap_bytes() -> int:
    return config.cache_max_mb * MIB


def tidy(
    root: Path,
    cap: int | None,
    log: Any = None,
    own_unheld: bool = False,
    cap_name: str = "config.cache_max_mb",
) -> Tidied:
    """Remove the cache's garbage, then what was used longest ago until it holds at most ``cap`` bytes.

    cap: None removes garbage only. cap_name: where the cap came from, for the log.
    own_unheld: this process's build folders that nothing holds are garbage too.
    """
    log = log if log is not None else get_logger()
    usage = scan(root, own_unheld=own_unheld)
    removed: list[tuple[Unit, int]] = []
    for unit in usage.of("garbage"):
        size = usage.drop(unit)
        if _remove(root, unit):
            removed.append((unit, size))
            log.info("cache cleaned", what=_name(root, unit), size_mb=_mb(size), why=unit.why)
    if cap is None or usage.total <= cap:
        return Tidied(removed, usage)
    for unit in sorted(usage.of("evictable"), key=lambda unit: (unit.last_used, str(unit.path))):
        if usage.total <= cap:
            break
        held = usage.total
        size = usage.drop(unit)
        if not _remove(root, unit):
            continue
        removed.append((unit, size))
        why = f"used longest ago, while the cache held {_mb(held)} MiB, over its {_mb(cap)} MiB cap ({cap_name})"
        log.info("cache evicted", what=_name(root, unit), size_mb=_mb(size), why=why)
    if usage.total > cap:
        log.warning(
            "cache over its cap",
            held_mb=_mb(usage.total),
            cap_mb=_mb(cap),
            why="what is left is in use by running processes",
            in_use=[_name(root, unit) for unit in usage.of("in use")][:10],
        )
    return Tidied(removed, usage)


def clear(root: Path, log: Any = None) -> Tidied:
    """Remove everything of the cache that no running process uses."""
    log = log if log is not None else get_logger()
    tidied = tidy(root, None, log)
    usage = tidied.usage
    for unit in usage.of("evictable"):
        size = usage.drop(unit)
        if _remove(root, unit):
            tidied.removed.append((unit, size))
            log.info("cache evicted", what=_name(root, unit), size_mb=_mb(size), why="aitune cache clear")
    return tidied


def tune_started(log: Any = None) -> None:
    """A ``tune()`` starts: count it, and remove what processes that are gone left in the cache."""
    folder_lifetime.tune_started()
    _quietly(lambda: tidy(cache_root(), None, log))


def tune_finished(log: Any = None) -> None:
    """A ``tune()`` ends: remove its build folders that nothing serves from, then keep the cache under its cap."""
    last = folder_lifetime.tune_finished()  # candidates that lost let go of their folders when discarded
    _quietly(lambda: tidy(cache_root(), cap_bytes(), log, own_unheld=last))


def _quietly(action: Any) -> None:
    """Tidying never fails a tune: a cache that cannot be read or tidied is logged and left as it is."""
    try:
        action()
    except Exception as error:
        get_logger().warning("cache not tidied", folder=str(cache_root()), reason=f"{type(error).__name__}: {error}")


def _remove(root: Path, unit: Unit) -> bool:
    if unit.part != BUILDS:
        return remove_aside(unit.path, root / REMOVING)
    if unit.path.parent.name == BUILDS:  # an empty identity folder: another build may be claiming a folder in it
        try:
            unit.path.rmdir()
        except OSError:
            return False
        return True
    if not unit.path.exists():
        return False
    folder_lifetime.remove_build_folder(unit.path)
    return True


def _name(root: Path, unit: Unit) -> str:
    try:
        return str(unit.path.relative_to(root))
    except ValueError:
        return str(unit.path)


def _mb(size: int) -> float:
    return round(size / MIB, 2)
