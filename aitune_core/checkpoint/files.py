"""Files inside a checkpoint: hashing, safe paths, and reading tensors without unpickling code."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from aitune_core.checkpoint.manifest import ArtifactRef, CheckpointError


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def add_file(root: Path, relative: str, source: Path | None = None) -> ArtifactRef:
    """Copy ``source`` to ``root/relative`` (or take the file already there) and describe it."""
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        shutil.copyfile(source, target)
    with target.open("rb") as handle:
        os.fsync(handle.fileno())
    return ArtifactRef(relative, sha256_of(target), target.stat().st_size)


def resolve(root: Path, ref: ArtifactRef) -> Path:
    """The file a reference names, refusing any path that leaves the checkpoint."""
    relative = PurePosixPath(ref.path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts or "\x00" in ref.path:
        raise CheckpointError(f"refusing artifact path {ref.path!r:.200}: it points outside the checkpoint")
    path = root.joinpath(*relative.parts)
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        raise CheckpointError(f"refusing artifact path {ref.path!r}: it resolves outside the checkpoint") from None
    return path


def verify(root: Path, ref: ArtifactRef) -> Path:
    """Resolve ``ref`` and check that the file exists and its sha256 matches the manifest."""
    try:
        path = resolve(root, ref)
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {ref.path[:200]} is missing from {root}")
        actual = sha256_of(path)
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint file {ref.path!r:.200}: {error.strerror}") from None
    if actual != ref.sha256:
        raise CheckpointError(
            f"checkpoint file {ref.path} was modified: its sha256 is {actual}, the manifest says {ref.sha256}; "
            "refusing to load it"
        )
    return path


def save_tensors(tensors: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, path)


def load_tensors(path: Path, map_location: Any = None) -> Any:
    """Read tensors with ``weights_only=True``: a crafted file cannot run code."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(f"refusing to load {path.name}: it is not plain tensor data ({error})") from error
