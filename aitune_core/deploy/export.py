"""``ait.export`` and ``aitune export CKPT --to TARGET PATH``: a checkpoint written for a server to serve.

The checkpoint is read as loading reads it (every file's sha256 checked, no path leaving
it, each backend restored by its installed class, nothing deployed or run); each graph's
route becomes a model with its standalone artifact (:mod:`aitune_core.deploy.plan`), and
the target chosen by name writes them (:mod:`aitune_core.deploy.target`). The summary
says what each model serves and, where tuning chose differently, how.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from aitune_core.checkpoint.files import verify
from aitune_core.checkpoint.load import read
from aitune_core.deploy.plan import plan_export
from aitune_core.deploy.target import DeployError, DeployModel, DeployTarget
from aitune_core.extensions import ensure_plugins
from aitune_core.log import get_logger
from aitune_core.metadata.tables import render_table


@attrs.frozen
class ExportSummary:
    """What an export wrote: ``print`` it for the table, then the notes."""

    target: str
    path: Path
    ranges: str
    models: tuple[DeployModel, ...]
    notes: tuple[str, ...]

    def __str__(self) -> str:
        rows = [
            [
                model.name,
                f"{model.module}/{model.graph}",
                model.backend,
                model.deployable.format,
                "-" if model.max_batch is None else f"{model.min_batch}-{model.max_batch}",
                ", ".join(map(str, model.batch_sizes)) or "-",
            ]
            for model in self.models
        ]
        headers = ["Model", "Module/graph", "Backend", "Format", "Batch", "Won at"]
        lines = [f"Exported {len(self.models)} model(s) to {self.target} repository {self.path} (ranges={self.ranges})"]
        lines.append(render_table(rows, headers, "simple"))
        notes = [f"  {model.name}: {note}" for model in self.models for note in model.notes] + [
            f"  {note}" for note in self.notes
        ]
        return "\n".join([*lines, *(["Notes:", *notes] if notes else [])])


def target_class(name: str) -> type[DeployTarget]:
    """The installed target registered as ``name``; DeployError naming those there are."""
    classes = ensure_plugins().target_classes()
    if name not in classes:
        known = ", ".join(sorted(classes)) or "none"
        raise DeployError(
            f"unknown deploy target {name!r} (installed: {known}); install a plugin that registers it "
            "(`aitune plugins` lists each plugin's targets)"
        )
    cls: type[DeployTarget] = classes[name]
    return cls


def export(
    checkpoint: str | os.PathLike[str],
    to: str,
    path: str | os.PathLike[str],
    *,
    ranges: str = "widest",
    overwrite: bool = False,
    options: Mapping[str, Any] | None = None,
) -> ExportSummary:
    """Write the checkpoint at ``checkpoint`` as a model repository of target ``to`` at ``path``.

    ranges: ``"widest"``: each graph is one model, the route with the widest batch range
        serving all of it; ``"each"``: each route with a standalone artifact is a model of
        its own (see :mod:`aitune_core.deploy.plan`).
    overwrite: replace models of the same names already at ``path``; others there stay.
    options: the target's options (``{"instances": 2}`` for Triton), by its ``options_class``.
    Raises DeployError, naming each graph and its fix, when a graph has no standalone
    artifact the target serves; nothing is written then. Returns the summary.
    """
    target = target_class(to)(**dict(options or {}))
    root, manifest = read(checkpoint)
    try:
        for ref in manifest.artifacts():
            verify(root, ref)
        plan = plan_export(root, manifest, target, ranges)
        notes = target.write(plan.models, Path(path), overwrite=overwrite)
    finally:
        if root != Path(checkpoint):
            shutil.rmtree(root, ignore_errors=True)  # an archive's files, unpacked for this export only
    summary = ExportSummary(to, Path(path), ranges, tuple(plan.models), (*plan.notes, *notes))
    get_logger().info("exported", target=to, path=str(path), models=[model.name for model in plan.models])
    return summary
