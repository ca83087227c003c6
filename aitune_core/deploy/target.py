"""Deploy targets: where a checkpoint's standalone artifacts are written for a server to serve.

Targets are plugins, registered as backends are (the ``aitune_register_targets`` hook)
and chosen by name: ``aitune export CKPT --to triton REPO``. A target is a class; the
lifecycle is here, in :meth:`DeployTarget.write`, and a target fills in its steps:

1. :meth:`DeployTarget.refuses` is asked of every model before anything is written (an
   artifact format the server cannot load, a dtype it has no type for), so a refused
   export writes nothing;
2. :meth:`DeployTarget.write_model` writes each model into a fresh staging folder beside
   the destination;
3. :meth:`DeployTarget.finish` may add what describes the repository as a whole;
4. each entry the target wrote then takes its place in the destination, one rename each;
   entries already there are replaced only with ``overwrite=True``.

What a target is given is data (:class:`DeployModel`): the artifact's description
(:class:`~aitune_core.backends.deployable.Deployable`) and what tuning measured about the
graph it serves. Options come from the user as the fields of the target's attrs
``options_class`` (``--option instances=2`` on the command line).
"""

from __future__ import annotations

import abc
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from aitune_core.backends.deployable import FORMATS, Deployable


def _sizes(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(value) for value in values)


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(value) for value in values)


class DeployError(ValueError):
    """A checkpoint cannot be deployed to a target as asked; the message names each graph concerned and the fix."""


@attrs.frozen
class DeployModel:
    """One model to deploy: a graph of a tuned module, served by one standalone artifact.

    name: the model's name in the target (a folder name there).
    module, graph: where it comes from in the checkpoint.
    backend: the backend that built the artifact, as the tuning summary shows it.
    batch_sizes: the tuned batch sizes this artifact was measured fastest at, ascending
        (a server that batches prefers those).
    min_batch, max_batch: the batch range it serves; None when the graph has no batch axis.
    notes: what the export's summary says about it (batch sizes other backends won, say).
    """

    name: str
    module: str
    graph: str
    backend: str
    deployable: Deployable
    batch_sizes: tuple[int, ...] = attrs.field(default=(), converter=_sizes)
    min_batch: int | None = None
    max_batch: int | None = None
    notes: tuple[str, ...] = attrs.field(default=(), converter=_texts)


@attrs.frozen
class NoOptions:
    """The options of a target that takes none."""


class DeployTarget(abc.ABC):
    """A server's model repository, written from standalone artifacts (see the module docstring).

    Class attributes a subclass sets:

    * ``name``: the registered name users pass to ``--to`` (``"triton"``);
    * ``formats``: the artifact formats it serves (of :data:`aitune_core.backends.deployable.FORMATS`);
    * ``options_class``: an attrs class of its options, each with a default.
    """

    name: ClassVar[str] = ""
    formats: ClassVar[tuple[str, ...]] = FORMATS
    options_class: ClassVar[type] = NoOptions

    def __init__(self, options: Any = None, **overrides: Any) -> None:
        if options is None:
            options = self.options_class(**overrides)
        elif not isinstance(options, self.options_class):
            raise TypeError(f"{type(self).__name__} takes {self.options_class.__name__}, got {type(options).__name__}")
        elif overrides:
            options = attrs.evolve(options, **overrides)  # type: ignore[misc]
        self.options = options

    def describe(self) -> str:
        return f"{type(self).__name__}({self.name})"

    # ------------------------------------------------------------------ the steps
    def refuses(self, model: DeployModel) -> str | None:
        """Why this target cannot serve ``model``, or None; asked of every model before anything is written."""
        if model.deployable.format not in self.formats:
            return f"{self.name} serves {', '.join(self.formats)}, not {model.deployable.format}"
        return None

    @abc.abstractmethod
    def write_model(self, model: DeployModel, folder: Path) -> Sequence[str]:
        """Write ``model`` into ``folder`` (the staging repository); return notes for the summary."""

    def finish(self, folder: Path, models: Sequence[DeployModel]) -> Sequence[str]:
        """Write what describes the whole repository, after every model; notes for the summary."""
        return ()

    # ------------------------------------------------------------------ the lifecycle
    def write(self, models: Sequence[DeployModel], destination: Path, overwrite: bool = False) -> list[str]:
        """Run the lifecycle into ``destination``; the notes of every step. Nothing is left half written."""
        refused = [f"{model.name}: {reason}" for model in models if (reason := self.refuses(model)) is not None]
        if refused:
            raise DeployError(f"{self.describe()} cannot take " + "; ".join(refused))
        if destination.exists() and not destination.is_dir():
            raise DeployError(f"{destination} is a file, not a folder to write a {self.name} repository into")
        destination.mkdir(parents=True, exist_ok=True)
        staging = destination.parent / f".{destination.name}.staging-{uuid.uuid4().hex[:12]}"
        staging.mkdir()
        try:
            notes = [note for model in models for note in self.write_model(model, staging)]
            notes.extend(self.finish(staging, models))
            entries = sorted(staging.iterdir())
            taken = [entry.name for entry in entries if (destination / entry.name).exists()]
            if taken and not overwrite:
                raise DeployError(
                    f"{destination} already holds {', '.join(taken)}; export into another folder, remove them, or "
                    "export with overwrite=True (--overwrite) to replace them"
                )
            for entry in entries:
                _replace(entry, destination / entry.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return notes


def _replace(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``; what was at ``target`` goes only once the new one is in place."""
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
    if target.exists():
        os.replace(target, old)
    try:
        os.replace(source, target)
    except BaseException:
        if old.exists():
            os.replace(old, target)
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    elif old.exists():
        old.unlink()
