"""The single-file form of a checkpoint: a zip of its folder, unpacked with path checks."""

from __future__ import annotations

import zipfile
from pathlib import Path, PurePosixPath

from aitune_core.checkpoint.manifest import CheckpointError


def pack(folder: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as bundle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                bundle.write(path, path.relative_to(folder).as_posix())


def is_archive(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def unpack(archive: Path, folder: Path) -> None:
    """Extract ``archive`` into ``folder``, refusing members that would land outside it."""
    with zipfile.ZipFile(archive) as bundle:
        for member in bundle.infolist():
            name = PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts:
                raise CheckpointError(f"refusing archive member {member.filename!r}: it points outside the checkpoint")
            if member.external_attr >> 16 & 0o170000 == 0o120000:
                raise CheckpointError(f"refusing archive member {member.filename!r}: it is a symbolic link")
        folder.mkdir(parents=True, exist_ok=True)
        bundle.extractall(folder)
