"""One stored build: a backend's ``to_dict()`` and its artifacts, as a checkpoint stores a backend.

An entry is a folder named after its key::

    <key>/entry.json             the record: key parts, extra state, artifact hashes
    <key>/entry.sig              HMAC of entry.json under the store's secret (:mod:`.trust`)
    <key>/artifacts/<name>/<file>  each artifact, as the backend named it

It is written from a candidate that passed: each file is hard-linked from its build
folder (so while the tuned module serves from that folder, the bytes are on disk once),
or copied where links are not possible, with its sha256 taken of the stored file
(:func:`~aitune_core.store.folders.link_or_copy_hashed`) and compared with the seal made
when it passed, so only what was validated is stored.
It is read back the other way: copied into the new candidate's own build folder, the
bytes hashed as they are copied and compared with the record, then restored by the
installed class of the distribution that wrote it
(:func:`~aitune_core.backends.restore.restore_backend`) and sealed with those hashes,
so that ``save`` checks the files against them as it checks a built candidate's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import attrs

from aitune_core.backends.artifacts import ArtifactSeal, SealedArtifact, copy_hashed, seal
from aitune_core.backends.base import Backend
from aitune_core.backends.persistable import check_persistable
from aitune_core.backends.restore import restore_backend
from aitune_core.serialization import converter
from aitune_core.store.folders import link_or_copy_hashed, write_whole
from aitune_core.store.key import store_key
from aitune_core.store.trust import ForeignEntryError, check_owned, check_signature, signature

RECORD_NAME = "entry.json"
SIGNATURE_NAME = "entry.sig"
ARTIFACTS = "artifacts"


class BadEntryError(ValueError):
    """An entry that cannot be used: unreadable, incomplete, or its files are not what it recorded."""


@attrs.frozen
class StoredFile:
    """One artifact of an entry: its file under ``artifacts/<name>/``, sha256, size, and whether it is native."""

    file: str
    sha256: str
    size: int
    native: bool = False


@attrs.define
class EntryRecord:
    """What ``entry.json`` holds."""

    key: str
    parts: dict[str, Any]
    module: str
    graph: str
    description: str
    is_jit: bool
    extra: dict[str, Any]
    artifacts: dict[str, StoredFile]
    created: float

    @property
    def backend(self) -> str:
        return str(self.parts.get("backend", "?"))

    @property
    def size(self) -> int:
        return sum(artifact.size for artifact in self.artifacts.values())


def write_entry(
    folder: Path,
    key: str,
    parts: dict[str, Any],
    backend: Backend,
    validated: ArtifactSeal,
    secret: bytes,
    where: tuple[str, str],
) -> EntryRecord:
    """Write the entry of ``backend`` (which passed, with the seal ``validated``) into the new folder ``folder``."""
    data = check_persistable(backend)
    declared = {name: Path(path) for name, path in data.get("artifacts", {}).items()}
    if set(declared) != set(validated.artifacts):
        raise BadEntryError(
            f"it declares artifacts {sorted(declared)} but was validated with {sorted(validated.artifacts)}"
        )
    native = backend.native_artifacts()
    files = {}
    for name, source in declared.items():
        file = _checked_name(name, source.name)
        sha256, size = link_or_copy_hashed(source, folder / ARTIFACTS / name / file)
        sealed = validated.artifacts[name]
        if sha256 != sealed.sha256 or size != sealed.size:
            raise BadEntryError(f"artifact {name!r} at {source} changed after it was validated")
        files[name] = StoredFile(file, sha256, size, native=name in native)
    record = EntryRecord(
        key=key,
        parts=parts,
        module=where[0],
        graph=where[1],
        description=backend.describe(),
        is_jit=backend.is_jit,
        extra=data.get("extra", {}),
        artifacts=files,
        created=time.time(),
    )
    text = json.dumps(converter().unstructure(record), indent=1, sort_keys=True).encode()
    write_whole(folder / RECORD_NAME, text)
    write_whole(folder / SIGNATURE_NAME, signature(secret, text).encode())
    return record


def read_entry(folder: Path, key: str, secret: bytes | None) -> EntryRecord:
    """The record of the entry at ``folder``, once it is known to be this store's and to be the entry of ``key``."""
    check_owned(folder)
    try:
        text = (folder / RECORD_NAME).read_bytes()
        stored_signature = (folder / SIGNATURE_NAME).read_text()
    except OSError as error:
        raise BadEntryError(f"it is incomplete ({error.strerror}: {Path(error.filename or '').name})") from None
    check_owned(folder / RECORD_NAME)
    check_signature(secret, text, stored_signature)
    try:
        record = converter().structure(json.loads(text), EntryRecord)
    except Exception as error:
        raise BadEntryError(f"its record does not read ({type(error).__name__}: {error})") from None
    if record.key != key or store_key(record.parts) != key or folder.name != key:
        raise BadEntryError("its record is of another key")
    return record


def restore_entry(folder: Path, record: EntryRecord, target: Path) -> Backend:
    """The stored backend, CHECKPOINT_LOADED, with its artifacts copied (and checked) into ``target``.

    Raises BadEntryError (a file missing or not what was recorded), ForeignEntryError
    (a file another user could have written), or what restoring the data raises.
    """
    paths: dict[str, str] = {}
    sealed: dict[str, SealedArtifact] = {}
    for name, stored in record.artifacts.items():
        file = _checked_name(name, stored.file)
        source = folder / ARTIFACTS / name / file
        try:
            check_owned(source)
            sha256, size = copy_hashed(source, target / ARTIFACTS / name / file)
        except OSError as error:
            raise BadEntryError(f"artifact {name!r} cannot be read ({error.strerror})") from None
        if sha256 != stored.sha256 or size != stored.size:
            raise BadEntryError(
                f"artifact {name!r} ({file}) has sha256 {sha256} ({size} bytes), but the entry recorded "
                f"{stored.sha256} ({stored.size} bytes): it was changed after it was stored"
            )
        paths[name] = str(target / ARTIFACTS / name / file)
        sealed[name] = SealedArtifact(paths[name], sha256, size)
    parts = record.parts
    data = {"config": parts["config"], "artifacts": paths, "extra": record.extra}
    backend = restore_backend(str(parts["backend"]), str(parts["distribution"]), str(parts["version"]), data)
    seal(backend, ArtifactSeal(sealed))
    return backend


def _checked_name(name: str, file: str) -> str:
    """``file``, when both it and the artifact ``name`` are plain names that stay inside the entry."""
    for part in (name, file):
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\x00" in part:
            raise ForeignEntryError(f"refusing artifact path {name!r}/{file!r}: it is not a plain file name")
    return file
