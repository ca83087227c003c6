"""TritonTarget: each model as ``<name>/<version>/<files>`` and ``<name>/config.pbtxt`` in a model repository.

The target lives in aitune-core rather than in a plugin of its own: it writes text and
copies files, with no library of Triton's, so it costs an installation nothing, and it
is the target the public contract names (``aitune export CKPT --to triton REPO``). It is
registered by the core's built-in plugin through the same hook as any other target.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import attrs
import torch

from aitune_core.deploy.target import DeployModel, DeployTarget
from aitune_core.deploy.triton.config import DEFAULT_FILES, TYPES, batching_refusal, model_config
from aitune_core.deploy.triton.pbtxt import render

CONFIG_FILE = "config.pbtxt"


def _at_least_one(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a whole number of at least 1, got {value!r}")


def _not_negative(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a whole number of at least 0, got {value!r}")


@attrs.frozen
class TritonOptions:
    """Options of the Triton target.

    instances: execution instances of each model (``instance_group.count``), on the
        device its artifact was built for.
    max_queue_delay_us: how long Triton's dynamic batcher holds a request for a fuller
        batch (``max_queue_delay_microseconds``); 0 sends what is queued at once.
    version: the model version folder the files go into.
    """

    instances: int = attrs.field(default=1, validator=_at_least_one)
    max_queue_delay_us: int = attrs.field(default=0, validator=_not_negative)
    version: int = attrs.field(default=1, validator=_at_least_one)


class TritonTarget(DeployTarget):
    """A Triton Inference Server model repository (see docs/deploy.md for what to check on a real server)."""

    name = "triton"
    formats = tuple(DEFAULT_FILES)
    options_class = TritonOptions
    options: TritonOptions

    def refuses(self, model: DeployModel) -> str | None:
        reason = super().refuses(model)
        if reason is not None:
            return reason
        deployable = model.deployable
        for tensor in (*deployable.inputs, *deployable.outputs):
            if tensor.dtype not in TYPES:
                return f"`{tensor.name}` is {tensor.dtype}, which Triton has no data type for"
            if tensor.dtype is torch.bfloat16 and deployable.format == "aoti_pt2":
                return f"`{tensor.name}` is bfloat16, which Triton's PyTorch backend does not take"
        return None

    def write_model(self, model: DeployModel, folder: Path) -> Sequence[str]:
        deployable = model.deployable
        files = folder / model.name / str(self.options.version)
        files.mkdir(parents=True)
        for name, source in deployable.files.items():
            shutil.copyfile(source, files / name)
        config = model_config(model, deployable.entry, self.options.instances, self.options.max_queue_delay_us)
        (folder / model.name / CONFIG_FILE).write_text(render(config))
        return _notes(model)


def _notes(model: DeployModel) -> list[str]:
    """What a server will do differently from what aitune measured and validated."""
    notes = []
    refusal = batching_refusal(model)
    if refusal is not None:
        notes.append(
            f"{model.name}: max_batch_size 0 ({refusal}); each request carries its own batch of "
            f"{model.min_batch} to {model.max_batch}"
        )
    elif model.min_batch is not None and model.min_batch > 1:
        notes.append(f"{model.name}: tuned from batch {model.min_batch}; Triton may form smaller batches")
    for tensor in (*model.deployable.inputs, *model.deployable.outputs):
        ranged = [
            f"axis {axis} {tensor.min_shape[axis]}-{tensor.max_shape[axis]}"
            for axis in range(tensor.rank)
            if tensor.varies(axis) and axis != tensor.batch_axis
        ]
        if ranged:
            notes.append(f"{model.name}: `{tensor.name}` {', '.join(ranged)} is -1 in Triton, which checks no range")
    return notes
