"""Seals: what a candidate's artifacts were when it passed validation.

A backend's files sit in its build folder from the build until ``save`` copies them,
minutes or hours later. What was validated and profiled is what the files held when
the candidate passed, so that is what a checkpoint may contain: when a candidate
passes, each artifact's path, sha256 and size is recorded in an :class:`ArtifactSeal`,
and ``save`` hashes every file again while it copies it and refuses one that no longer
matches.

Seals are kept beside the backend instance (not in it), so backends need no field for
them; a backend that was never sealed (restored by ``load``, built by hand) is saved as
its files are, after the checks of :mod:`aitune_core.backends.persistable`.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from aitune_core.backends.base import Backend
from aitune_core.backends.persistable import check_persistable

_BLOCK = 1 << 20

_seals: weakref.WeakKeyDictionary[Backend, ArtifactSeal] = weakref.WeakKeyDictionary()


@attrs.frozen
class SealedArtifact:
    """One artifact as validated: where it was, its sha256 and size in bytes."""

    path: str
    sha256: str
    size: int


@attrs.frozen
class ArtifactSeal:
    """Every artifact of one passed candidate, by the name its backend gives it."""

    artifacts: dict[str, SealedArtifact] = attrs.field(factory=dict)

    @classmethod
    def of(cls, artifacts: dict[str, Any]) -> ArtifactSeal:
        """Hash each of ``artifacts`` (``{name: path}``) now."""
        sealed = {}
        for name, path in artifacts.items():
            sha256, size = hash_file(Path(path))
            sealed[name] = SealedArtifact(str(path), sha256, size)
        return cls(sealed)

    def to_data(self) -> dict[str, dict[str, Any]]:
        return {name: attrs.asdict(artifact) for name, artifact in self.artifacts.items()}

    @classmethod
    def from_data(cls, data: dict[str, dict[str, Any]]) -> ArtifactSeal:
        return cls({name: SealedArtifact(str(a["path"]), str(a["sha256"]), int(a["size"])) for name, a in data.items()})

    def moved(self, paths: dict[str, str]) -> ArtifactSeal:
        """The same hashes at new paths (a worker's files, copied to this machine)."""
        return ArtifactSeal(
            {
                name: attrs.evolve(artifact, path=str(paths.get(name, artifact.path)))
                for name, artifact in self.artifacts.items()
            }
        )


class ArtifactChangedError(RuntimeError):
    """An artifact's bytes differ from what was sealed when its candidate passed."""


def seal_passed(backend: Backend) -> ArtifactSeal:
    """Check that ``backend`` can be saved and seal its artifacts as they are now.

    Called when its candidate passes; raises
    :class:`~aitune_core.backends.persistable.NotPersistableError`, which fails the
    candidate, when its ``to_dict()`` could not be saved.
    """
    data = check_persistable(backend)
    artifact_seal = ArtifactSeal.of(data.get("artifacts", {}))
    seal(backend, artifact_seal)
    return artifact_seal


def seal(backend: Backend, artifact_seal: ArtifactSeal) -> None:
    _seals[backend] = artifact_seal


def seal_of(backend: Backend) -> ArtifactSeal | None:
    """The seal made when ``backend`` passed, or None for a backend that was never sealed."""
    return _seals.get(backend)


def hash_file(path: Path) -> tuple[str, int]:
    """``(sha256, size)`` of the file at ``path``."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def copy_hashed(source: Path, target: Path) -> tuple[str, int]:
    """Copy ``source`` to ``target`` and return ``(sha256, size)`` of the bytes written.

    One read: the hash is of exactly the bytes that went into ``target``, so a file
    rewritten while it is copied cannot pass under an earlier hash.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as reader, target.open("wb") as writer:
        for block in _blocks(reader):
            digest.update(block)
            writer.write(block)
            size += len(block)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest(), size


def _blocks(handle: BinaryIO) -> Any:
    return iter(lambda: handle.read(_BLOCK), b"")


def verify_files(artifact_seal: ArtifactSeal, paths: dict[str, str], what: str) -> None:
    """Check that the files at ``paths`` hold what ``artifact_seal`` recorded; ``what`` names the backend."""
    for name, artifact in artifact_seal.artifacts.items():
        path = paths.get(name)
        if path is None:
            raise ArtifactChangedError(f"{what}: artifact {name!r} was validated but did not come back")
        sha256, size = hash_file(Path(path))
        if sha256 != artifact.sha256 or size != artifact.size:
            raise ArtifactChangedError(
                f"{what}: artifact {name!r} at {path} has sha256 {sha256} ({size} bytes), but the validated "
                f"file had {artifact.sha256} ({artifact.size} bytes)"
            )
