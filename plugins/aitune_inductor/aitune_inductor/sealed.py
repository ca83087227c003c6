"""Files a backend writes and later reads back only as the bytes it recorded, or not at all.

A backend that keeps an artifact also keeps the artifact's sha256 in its own state, so
that a file changed after the checkpoint's manifest was checked (or a manifest whose
hash was rewritten with it) is refused. The file is read once and the bytes checked are
the bytes used, whatever happens to the file meanwhile.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def write_sealed(data: bytes, path: Path) -> str:
    """Write ``data`` to ``path`` (making its folder); returns the sha256 to keep with the backend."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_sealed(path: Path, sha256: str, what: str, error: type[Exception]) -> bytes:
    """The bytes at ``path``, when their sha256 is ``sha256``; raises ``error`` naming ``what`` otherwise."""
    data = path.read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise error(
            f"{what} {path} has sha256 {found}, but the backend stored {sha256}; it was changed after it was saved "
            "and is not loaded"
        )
    return data


def stored_sha256(extra: dict[str, Any], key: str, what: str) -> str:
    """The sha256 a backend stored under ``key`` of its extra state for an artifact it restores; raises without one."""
    sha256 = extra.get(key)
    if not isinstance(sha256, str) or len(sha256) != 64:
        raise ValueError(f"{what} comes without the sha256 it was saved with")
    return sha256


def left_unread(log: Any, what: str, holds: str, backend: str, build_info: dict[str, Any], key: str) -> None:
    """Say that an optional native artifact stays unread because the load does not trust native code."""
    log.warning(
        f"{what} not loaded: it holds {holds}, native code that runs only with trust_native_code=True; compiling again",
        backend=backend,
    )
    build_info[key] = "not loaded (trust_native_code=False)"
