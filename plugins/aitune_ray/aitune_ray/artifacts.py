"""A winner's artifacts as bytes, for workers that do not share the driver's disk.

A worker packs the files of an ahead-of-time backend that passed; they stay in Ray's
object store unless the driver fetches them and writes them into build folders of its
own (:func:`unpack_artifacts`), so losing candidates' artifacts never cross the network.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from aitune_core.plugin_api import BUILDS
from aitune_core.plugin_api.executors import claim_build_folder

PackedArtifacts = dict[str, tuple[str, bytes]]

FETCHED = "fetched"
"""The identity folder for artifacts a worker wrote outside a build folder of its own."""


def pack_artifacts(artifacts: dict[str, str], root: Path) -> PackedArtifacts:
    """``{name: (path relative to root, bytes)}`` for artifacts that must cross machines."""
    packed = {}
    for name, path in artifacts.items():
        file = Path(path)
        try:
            relative = file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            relative = f"{name}/{file.name}"
        packed[name] = (relative, file.read_bytes())
    return packed


def unpack_artifacts(packed: PackedArtifacts, builds: Path) -> dict[str, str]:
    """Write packed artifacts into new build folders of this process under ``builds``; their paths here.

    The files of each worker's ``builds/<identity>/<build>`` folder go to a folder
    ``builds/<identity>/<pid>-<random>`` claimed here, named after this process, so the
    cache counts them as build folders (:mod:`aitune_core.store.usage`): a restored
    winner holds its folder while it serves, the end of the tune removes the folders of
    candidates that lost, and a driver that was killed leaves folders that the next run
    removes. Files a worker wrote elsewhere go to a folder of identity ``fetched``.
    Nothing is written outside ``builds``.
    """
    folders: dict[tuple[str, str], Path] = {}
    paths = {}
    for name, (relative, data) in packed.items():
        identity, build, inside = _split(name, relative)
        folder = folders.get((identity, build))
        if folder is None:
            folder = folders[identity, build] = claim_build_folder(builds, identity)
        target = (folder / inside).resolve()
        if not inside or not target.is_relative_to(folder.resolve()):
            raise ValueError(f"artifact {name!r} would be written outside {folder}: {relative!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        paths[name] = str(target)
    return paths


def _split(name: str, relative: str) -> tuple[str, str, str]:
    """``(identity, worker's build folder, path inside it)`` of a packed path; raises ValueError for a bad identity."""
    parts = PurePosixPath(relative).parts
    if len(parts) > 3 and parts[0] == BUILDS:
        identity, build, inside = parts[1], parts[2], PurePosixPath(*parts[3:]).as_posix()
    else:
        identity, build, inside = FETCHED, "", relative
    if identity in ("", ".", "..") or identity.startswith(".") or "/" in identity or "\\" in identity:
        raise ValueError(f"artifact {name!r} names no plain build identity: {relative!r}")
    return identity, build, inside
