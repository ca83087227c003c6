"""The single-file form of a checkpoint: a zip of its folder, unpacked with every member checked.

An archive may come from anywhere, so every member is checked before a byte is
written: its name stays inside the folder (no absolute paths, ``..``, backslashes or
drive letters), it is a regular file (no links, devices or folders posing as files),
no name repeats, and the sizes it claims add up to something sane. Members are then
written one by one into the new folder, never over anything that was there.
"""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from aitune_core.checkpoint.manifest import CheckpointError

MAX_MEMBERS = 100_000
MAX_COMPRESSION_RATIO = 200
"""A deflated member that expands more than this is refused (a zip bomb, not tensors)."""


def pack(folder: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as bundle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                bundle.write(path, path.relative_to(folder).as_posix())


def is_archive(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def check_member(member: zipfile.ZipInfo) -> PurePosixPath:
    """The member's path inside the folder, or CheckpointError naming what is wrong with it."""
    raw = member.filename
    name = PurePosixPath(raw)
    if (
        not raw
        or "\\" in raw
        or "\x00" in raw
        or name.is_absolute()
        or ".." in name.parts
        or (name.parts and ":" in name.parts[0])
    ):
        raise CheckpointError(f"refusing archive member {raw!r}: it points outside the checkpoint")
    mode = member.external_attr >> 16
    if member.is_dir():
        return name
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise CheckpointError(f"refusing archive member {raw!r}: it is {kind}")
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(f"refusing archive member {raw!r}: compression method {member.compress_type}")
    if member.file_size > max(member.compress_size, 1) * MAX_COMPRESSION_RATIO:
        raise CheckpointError(
            f"refusing archive member {raw!r}: it expands {member.file_size} bytes from {member.compress_size}"
        )
    return name


def unpack(archive: Path, folder: Path) -> None:
    """Extract ``archive`` into the existing, empty ``folder``, refusing members that could land outside it."""
    try:
        bundle = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(f"{archive} is not a readable archive: {error}") from error
    with bundle:
        members = bundle.infolist()
        if len(members) > MAX_MEMBERS:
            raise CheckpointError(f"refusing {archive}: {len(members)} members, more than {MAX_MEMBERS}")
        seen: set[str] = set()
        files = []
        for member in members:
            name = check_member(member)
            key = name.as_posix()
            if key in seen:
                raise CheckpointError(f"refusing archive member {member.filename!r}: the name appears twice")
            seen.add(key)
            if not member.is_dir():
                files.append((member, name))
        for member, name in files:
            target = folder.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with bundle.open(member) as source, target.open("xb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
            except (zipfile.BadZipFile, OSError) as error:
                raise CheckpointError(f"cannot extract {member.filename!r} from {archive}: {error}") from error
