"""A winner's artifacts as bytes, for workers that do not share the driver's disk.

A worker packs the files of an ahead-of-time backend that passed; they stay in Ray's
object store unless the driver fetches them for the winner and writes them under its
own cache folder, so losing candidates' artifacts never cross the network.
"""

from __future__ import annotations

from pathlib import Path

PackedArtifacts = dict[str, tuple[str, bytes]]


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


def unpack_artifacts(packed: PackedArtifacts, root: Path) -> dict[str, str]:
    """Write packed artifacts under ``root`` and return their new paths; nothing escapes ``root``."""
    paths = {}
    base = root.resolve()
    for name, (relative, data) in packed.items():
        target = (root / relative).resolve()
        if not target.is_relative_to(base):
            raise ValueError(f"artifact {name!r} would be written outside {root}: {relative!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        paths[name] = str(target)
    return paths
