"""Reading a Triton model repository as Triton does, for the tests of deploy targets and of backends' artifacts.

Triton itself cannot be installed with pip, so the tests check what it would read: every
``config.pbtxt`` is parsed by protobuf's own text parser into Triton's ``ModelConfig``
message (``tritonclient``'s ``model_config_pb2``), and each model is then run from the
repository alone by its own runtime, fed by the names, data types and shapes the
configuration declares (:func:`feeds`). :func:`write_models` writes models described by
hand, for a backend's artifact tested without a checkpoint; :func:`demo_cnn` is the model the
deploy tests of every plugin export.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from aitune_core.demo.models import DemoCNN, cnn_samples
from aitune_core.deploy.export import target_class
from aitune_core.deploy.target import DeployModel

CONFIG_FILE = "config.pbtxt"
DTYPES = {
    "TYPE_BOOL": torch.bool,
    "TYPE_UINT8": torch.uint8,
    "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32,
    "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16,
    "TYPE_FP32": torch.float32,
    "TYPE_FP64": torch.float64,
    "TYPE_BF16": torch.bfloat16,
}


def read_config(model_folder: Path) -> Any:
    """``model_folder/config.pbtxt`` parsed into Triton's ``ModelConfig``; a parse error fails the caller."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = (Path(model_folder) / CONFIG_FILE).read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def data_type(tensor: Any) -> torch.dtype:
    """The torch dtype of a config's input or output (its ``data_type``)."""
    from tritonclient.grpc import model_config_pb2

    return DTYPES[model_config_pb2.DataType.Name(tensor.data_type)]


def full_shape(config: Any, tensor: Any) -> list[int]:
    """The whole shape a request gives: ``[-1] + dims`` for a batching model, else ``dims``."""
    return ([-1] if config.max_batch_size > 0 else []) + list(tensor.dims)


def fits(config: Any, tensor: Any, value: torch.Tensor) -> bool:
    """Whether ``value`` is a tensor the configuration accepts for ``tensor`` (dtype, rank, sizes, batch)."""
    shape = full_shape(config, tensor)
    if value.dtype != data_type(tensor) or value.dim() != len(shape):
        return False
    if config.max_batch_size > 0 and value.shape[0] > config.max_batch_size:
        return False
    return all(want in (-1, have) for want, have in zip(shape, value.shape, strict=True))


def feeds(config: Any, values: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{input name: value}`` in the configuration's input order, each value checked against its declaration."""
    if len(values) != len(config.input):
        raise AssertionError(f"{config.name} declares {len(config.input)} inputs, {len(values)} were given")
    named = {}
    for tensor, value in zip(config.input, values, strict=True):
        if not fits(config, tensor, value):
            raise AssertionError(
                f"{config.name}: {tensor.name} takes {data_type(tensor)} {full_shape(config, tensor)}, "
                f"got {value.dtype} {list(value.shape)}"
            )
        named[tensor.name] = value
    return named


def write_models(models: Sequence[DeployModel], repository: Path, **options: Any) -> list[str]:
    """Write ``models`` with the installed Triton target, as ``ait.export`` does once it has planned them."""
    return target_class("triton")(**options).write(models, Path(repository))


def demo_cnn() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The demo's CNN (``aitune demo --model cnn``) in eval mode, from seed 0, and four unbatched images."""
    torch.manual_seed(0)
    return DemoCNN().eval(), cnn_samples(4)
