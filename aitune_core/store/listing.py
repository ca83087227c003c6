"""``aitune cache``: what the cache holds, part by part and entry by entry, and what pruning and clearing removed."""

from __future__ import annotations

import time
from collections import Counter

from aitune_core.store.eviction import Tidied
from aitune_core.store.store import ArtifactStore, Listed
from aitune_core.store.usage import OTHER, PARTS, Unit, Usage


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def age(seconds: float) -> str:
    """``"42 s"``, ``"5 min"``, ``"3 h"``, ``"2 d"``."""
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f} {unit}"
    return f"{max(0.0, seconds):.0f} s"


def rows(entries: list[Listed], now: float | None = None) -> list[list[str]]:
    """One row per entry, most recently used first: key, backend, what it was built for, size, ages."""
    now = time.time() if now is None else now
    table = []
    for entry in reversed(entries):
        record = entry.record
        if record is None:
            table.append([entry.key[:16], "?", f"unusable: {entry.problem}", megabytes(entry.size), "-", "-"])
            continue
        native = " (native code)" if any(a.native for a in record.artifacts.values()) else ""
        table.append(
            [
                entry.key[:16],
                f"{record.description} [{record.parts.get('distribution')} {record.parts.get('version')}]{native}",
                f"{record.module} graph {record.graph} on {record.parts.get('device')}",
                megabytes(entry.size),
                age(now - record.created),
                age(now - entry.last_used),
            ]
        )
    return table


HEADERS = ["Entry", "Backend", "Built for", "Size", "Age", "Last used"]
PART_HEADERS = ["Part", "Size", "Units", "In use", "Garbage"]

_WHAT = {
    "store": "built candidates (artifact store)",
    "builds": "build folders",
    "exports": "ONNX exports shared by candidates",
    "loaded": "checkpoints loaded by running processes",
    "jit": "aitune-jit's tuned checkpoints",
    "inductor": "aitune-inductor's CPU records",
    OTHER: "anything else (removed by hand only)",
}


def part_rows(usage: Usage) -> list[list[str]]:
    """One row per part of the cache: its size, and how many units it has, are in use, and are garbage."""
    counts: dict[str, Counter[str]] = {part: Counter() for part in PARTS}
    for unit in usage.units:
        counts.setdefault(unit.part, Counter())[unit.status] += 1
    table = []
    for part in PARTS:
        count = counts[part]
        units = sum(count.values())
        size = usage.part_size(part)
        if not units and not size:
            continue
        table.append(
            [f"{part}: {_WHAT[part]}", megabytes(size), str(units), str(count["in use"]), str(count["garbage"])]
        )
    return table


def summary(usage: Usage, cap: int, store: ArtifactStore, entries: list[Listed]) -> str:
    """The totals under the tables: the whole cache against its cap, and the store against its own."""
    stored = sum(entry.size for entry in entries)
    store_cap = (
        f"its own cap is {megabytes(store.max_bytes)} (config.store_max_mb, AITUNE_STORE_MAX_MB)"
        if store.max_bytes is not None
        else "it shares the cache's cap"
    )
    return (
        f"{megabytes(usage.total)} of the {megabytes(cap)} cap (config.cache_max_mb, AITUNE_CACHE_MAX_MB) in "
        f"{usage.root}\nstore: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {megabytes(stored)}; "
        f"{store_cap}"
    )


def removed_text(tidied: Tidied) -> str:
    """``removed 3 (12.0 MiB): store 2, builds 1``: what a prune or clear removed, by part."""
    by_part = Counter(unit.part for unit, _ in tidied.removed)
    parts = ", ".join(f"{part} {count}" for part, count in sorted(by_part.items()))
    return f"removed {len(tidied.removed)} ({megabytes(tidied.freed)})" + (f": {parts}" if parts else "")


def in_use_text(units: list[Unit], limit: int = 5) -> str:
    """What stays because running processes use it, for the lines after a prune or clear."""
    if not units:
        return ""
    shown = "; ".join(f"{unit.path.name} ({unit.why})" for unit in units[:limit])
    more = f"; and {len(units) - limit} more" if len(units) > limit else ""
    return f"kept, in use: {shown}{more}"
