"""Checking a ``.pt2`` package before torch opens it, and unpacking it where nothing else writes.

A ``.pt2`` package is a zip file, and torch's package loader extracts the members it
needs under their stored names: a member named ``<root>/data/aotinductor/model/../../x``
lands outside the loader's folder, and one that is huge or highly compressed fills the
disk. Packages travel in checkpoints, so a package is data from elsewhere: aitune opens
it itself first, refuses any member whose name, type or size is not what torch writes,
and extracts the rest into a fresh folder only this process may enter (mode 0700).
torch is then handed that folder, or a clean copy of the package written there, and
never sees the original file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import weakref
import zipfile
from dataclasses import dataclass
from pathlib import Path

MAX_MEMBERS = 10_000
"""Packages torch writes hold a few dozen files (more with many CUDA kernels)."""
MAX_TOTAL_BYTES = 64 * 2**30
"""The most a package may hold once extracted; the shared library carries the weights."""
MAX_RATIO = 100.0
"""The most a member may grow when decompressed; torch stores members uncompressed (ratio 1)."""
RATIO_FLOOR_BYTES = 2**20
"""Members smaller than this are not held to MAX_RATIO: small text compresses well and costs nothing."""
MAX_NAME_CHARS = 1024
MAX_PART_BYTES = 255
"""The longest file name most file systems take."""
COPY_BLOCK = 2**20

_DRIVE = re.compile(r"^[A-Za-z]:")
_FIX = "rebuild it with aitune (or torch._inductor.aoti_compile_and_package) and do not edit it afterwards"


@dataclass(frozen=True)
class PackageLimits:
    """Bounds a package must keep to; raise them only for a package you built yourself."""

    max_members: int = MAX_MEMBERS
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_ratio: float = MAX_RATIO


DEFAULT_LIMITS = PackageLimits()


def check_package(path: Path, limits: PackageLimits = DEFAULT_LIMITS) -> list[zipfile.ZipInfo]:
    """The package's members, once every one passed the checks; raises ValueError naming the first that did not."""
    with _open_zip(path) as archive:
        return _checked_members(archive, path, limits)


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as error:
        raise ValueError(f"refusing AOT package {path}: it is not a valid zip file ({error}); {_FIX}") from None


def _checked_members(archive: zipfile.ZipFile, path: Path, limits: PackageLimits) -> list[zipfile.ZipInfo]:
    members = archive.infolist()
    if len(members) > limits.max_members:
        raise ValueError(
            f"refusing AOT package {path}: it holds {len(members)} members, more than the limit of "
            f"{limits.max_members}; {_FIX}"
        )
    seen: set[str] = set()
    total = 0
    for member in members:
        problem = _member_problem(member, limits) or _duplicate(member, seen)
        if problem is not None:
            raise ValueError(f"refusing AOT package {path}: member {member.orig_filename!r} {problem}; {_FIX}")
        total += member.file_size
        if total > limits.max_total_bytes:
            raise ValueError(
                f"refusing AOT package {path}: member {member.filename!r} takes it past the limit of "
                f"{limits.max_total_bytes} bytes once extracted; {_FIX}"
            )
    return members


class CheckedPackage:
    """A checked package, unpacked into a private folder that is removed with this object.

    ``tree`` holds the members under their names; :meth:`clean_copy` writes them back
    into a zip file for a torch whose loader reads nothing else. Whatever loads from
    the folder must keep this object alive: CUDA kernels are read from it lazily.
    """

    def __init__(self, folder: Path, names: list[str]) -> None:
        self.folder = folder
        self.tree = folder / "package"
        self._names = names
        self._finalizer = weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)

    def clean_copy(self) -> Path:
        """The checked members as a new, uncompressed ``.pt2`` file inside the private folder."""
        copy = self.folder / "package.pt2"
        with zipfile.ZipFile(copy, "x", compression=zipfile.ZIP_STORED) as archive:
            for name in self._names:
                source = self.tree.joinpath(*name.rstrip("/").split("/"))
                if not name.endswith("/"):
                    archive.write(source, name)
        return copy

    def remove(self) -> None:
        self._finalizer()


def unpack_package(path: Path, parent: Path | None = None, limits: PackageLimits = DEFAULT_LIMITS) -> CheckedPackage:
    """Check ``path`` and extract it into a fresh folder (mode 0700) under ``parent``, or the temp folder.

    Raises ValueError naming the member when the package is refused; nothing is
    written outside the new folder, which is gone again when this raises.
    """
    # One open file for checking and extracting: what is extracted is what was checked.
    with _open_zip(path) as archive:
        members = _checked_members(archive, path, limits)
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="aitune-aot-", dir=parent))
        package = CheckedPackage(folder, [member.filename for member in members])
        try:
            package.tree.mkdir(mode=0o700)
            for member in members:
                _extract(archive, member, package.tree, path)
        except BaseException:
            package.remove()
            raise
    return package


# --------------------------------------------------------------------------- checks
def _member_problem(member: zipfile.ZipInfo, limits: PackageLimits) -> str | None:
    """Why ``member`` is refused, or None."""
    name = member.orig_filename
    if not name:
        return "has an empty name"
    if "\x00" in name:
        return "has a NUL character in its name"
    if "\\" in name:
        return "uses a backslash, which Windows reads as a folder separator"
    if name.startswith("/"):
        return "is an absolute path"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    parts = (name[:-1] if name.endswith("/") else name).split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' path component, which could point outside the package"
    if len(name) > MAX_NAME_CHARS or any(len(part.encode()) > MAX_PART_BYTES for part in parts):
        return "has an over-long name"
    kind = stat.S_IFMT(member.external_attr >> 16)
    if kind not in (0, stat.S_IFDIR if member.is_dir() else stat.S_IFREG):
        return f"is not a plain file or folder (file type {oct(kind)}: a link or device)"
    if member.flag_bits & 0x1:
        return "is encrypted"
    if member.file_size > RATIO_FLOOR_BYTES and member.file_size > limits.max_ratio * max(member.compress_size, 1):
        return (
            f"would grow from {member.compress_size} to {member.file_size} bytes when decompressed, more than "
            f"{limits.max_ratio:g} times"
        )
    return None


def _duplicate(member: zipfile.ZipInfo, seen: set[str]) -> str | None:
    """Names that differ only in case collide on case-insensitive file systems, so they count as one."""
    key = member.filename.rstrip("/").casefold()
    if key in seen:
        return "appears twice (a later copy would replace what was checked first)"
    seen.add(key)
    return None


# --------------------------------------------------------------------------- extraction
def _extract(archive: zipfile.ZipFile, member: zipfile.ZipInfo, tree: Path, path: Path) -> None:
    target = tree.joinpath(*member.filename.rstrip("/").split("/"))
    if member.is_dir():
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_inside(target, tree, member, path)
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_inside(target.parent, tree, member, path)
    # O_EXCL and O_NOFOLLOW: a file is only ever created, never one already there written through.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        with os.fdopen(os.open(target, flags, 0o600), "wb") as out, archive.open(member) as source:
            written = 0
            while block := source.read(COPY_BLOCK):
                written += len(block)
                if written > member.file_size:
                    raise ValueError(
                        f"refusing AOT package {path}: member {member.filename!r} holds more than the "
                        f"{member.file_size} bytes it declares; {_FIX}"
                    )
                out.write(block)
    except zipfile.BadZipFile as error:
        raise ValueError(
            f"refusing AOT package {path}: member {member.filename!r} is damaged ({error}); {_FIX}"
        ) from None


def _check_inside(folder: Path, tree: Path, member: zipfile.ZipInfo, path: Path) -> None:
    if not folder.resolve().is_relative_to(tree.resolve()):
        raise ValueError(f"refusing AOT package {path}: member {member.filename!r} resolves outside its folder")
