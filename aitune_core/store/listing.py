"""``aitune cache``: what the store holds, as a table, and its pruning and clearing, as text."""

from __future__ import annotations

import time

from aitune_core.store.store import ArtifactStore, Listed


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


def summary(store: ArtifactStore, entries: list[Listed]) -> str:
    total = sum(entry.size for entry in entries)
    return (
        f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {megabytes(total)} of the "
        f"{megabytes(store.max_bytes)} cap (config.store_max_mb, AITUNE_STORE_MAX_MB) in {store.root}"
    )
