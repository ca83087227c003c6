"""The max batch search's finding, kept beside the builds: a search is work done once too.

MaxThroughputStrategy times eager at growing batch sizes to find where throughput stops
growing, and widens the graph's batch range to it before anything is built. That
finding is timed, so it can differ from one tune to the next on a busy machine, and
with it the graph spec every store key holds: a second tune would find nothing stored.
So the finding is kept under a key of the graph as recorded (before widening), the
weights, the search's settings, torch and the device, and a later tune of the same
takes it instead of searching again. It is one number; a wrong one only changes the
batch range candidates are built and validated for.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

from aitune_core.store.folders import write_whole
from aitune_core.store.key import store_key
from aitune_core.store.store import ArtifactStore
from aitune_core.store.trust import check_owned, private_folder

SEARCHES = "searches"


def _path(store: ArtifactStore, parts: dict[str, Any]) -> Path:
    return store.root / SEARCHES / f"{store_key(parts)}.json"


def recalled(store: ArtifactStore, parts: dict[str, Any]) -> int | None:
    """The batch size a search with ``parts`` found before, or None."""
    path = _path(store, parts)
    try:
        check_owned(path)
        found = json.loads(path.read_text()).get("max_batch_size")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


def remember(store: ArtifactStore, parts: dict[str, Any], max_batch_size: int) -> None:
    """Keep what a search with ``parts`` found (written whole, then renamed into place)."""
    path = _path(store, parts)
    staged = path.with_name(f".{os.getpid()}-{secrets.token_hex(4)}")
    try:
        private_folder(store.root)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_whole(staged, json.dumps({"max_batch_size": max_batch_size}).encode())
        os.replace(staged, path)
    except OSError:  # a full disk, say: the search is simply done again next time
        with contextlib.suppress(OSError):
            staged.unlink()
