"""ONNX Runtime winners exported to a Triton model repository, and run from it by ONNX Runtime alone.

Triton cannot be installed here, so each test checks what it would read and run: the
``config.pbtxt`` parsed into Triton's ``ModelConfig``, and the model folder's ``model.onnx``
opened by a plain ``onnxruntime.InferenceSession`` (no aitune, no model code), fed by the
configuration's names, dtypes and shapes, giving what the checkpoint loaded into a fresh
model gives.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE
from aitune_core.testing.triton import demo_cnn, feeds, fits, read_config
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow
pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig (tritonclient[grpc])")


def run_from_repository(model_folder: Path, config: Any, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The model file alone, in a fresh ONNX Runtime session, fed by the configuration's names."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(model_folder / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    named = {name: value.numpy() for name, value in feeds(config, inputs).items()}
    outputs = session.run([tensor.name for tensor in config.output], named)
    results = [torch.from_numpy(value) for value in outputs]
    for tensor, value in zip(config.output, results, strict=True):
        assert fits(config, tensor, value), (tensor.name, value.shape)
    return results


def tune_and_save(
    module: torch.nn.Module, name: str, gather: Callable[..., Any], dataset: list[Any], path: Path
) -> None:
    wrapped = ait.Module(module, name)
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(intra_op_num_threads=1), profile=FAST_PROFILE)
    ait.tune(gather(wrapped), dataset, batch_sizes=[1, 2, 4], strategy=strategy)
    ait.save(wrapped, path)
    del wrapped
    gc.collect()  # the name is free again for the fresh model the checkpoint loads into


def test_the_demo_cnn_runs_from_its_triton_repository_as_the_checkpoint_does(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = unique_name("cnn")
    model, images = demo_cnn()
    tune_and_save(model, name, lambda wrapped: wrapped, images, tmp_path / "ckpt")
    summary = ait.export(tmp_path / "ckpt", "triton", tmp_path / "repo")

    (model,) = summary.models
    folder = tmp_path / "repo" / model.name
    config = read_config(folder)
    assert (config.name, config.platform, config.max_batch_size) == (model.name, "onnxruntime_onnx", 4)
    assert [(t.name, list(t.dims)) for t in config.input] == [("images", [3, 32, 32])]
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4]
    assert config.parameters["intra_op_thread_count"].string_value == "1"
    assert model.backend == "ONNXRuntimeBackend(intra_op_num_threads=1)" and model.module == name

    loaded = ait.load(demo_cnn()[0], tmp_path / "ckpt")  # a fresh model: the checkpoint's weights replace its own
    for batch in (1, 3, 4):
        batch_images = torch.randn(batch, 3, 32, 32)
        (served,) = run_from_repository(folder, config, [batch_images])
        with torch.no_grad():
            torch.testing.assert_close(served, loaded(batch_images), rtol=1e-4, atol=1e-5)


def tiny_bert() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        return_dict=False,
    )
    return transformers.BertModel(config).eval()


def tokens(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 100, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[:, length - 2 :] = 0  # padding at the end
    return ids, mask


def at_two_lengths(wrapped: Callable[..., Any]) -> Callable[..., None]:
    def gather(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        for length in (8, 16):
            wrapped(input_ids=input_ids[:, :length], attention_mask=attention_mask[:, :length])

    return gather


def test_a_tiny_bert_runs_from_its_triton_repository_as_the_checkpoint_does(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = unique_name("bert")
    dataset = [
        dict(zip(("input_ids", "attention_mask"), (t[0] for t in tokens(1, 16, seed)), strict=True))
        for seed in range(4)
    ]
    tune_and_save(tiny_bert(), name, at_two_lengths, dataset, tmp_path / "ckpt")
    summary = ait.export(tmp_path / "ckpt", "triton", tmp_path / "repo")

    (model,) = summary.models
    folder = tmp_path / "repo" / model.name
    config = read_config(folder)
    assert (config.platform, config.max_batch_size) == ("onnxruntime_onnx", 4)
    assert [(t.name, list(t.dims)) for t in config.input] == [("input_ids", [-1]), ("attention_mask", [-1])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("output_0", [-1, 32]), ("output_1", [32])]
    assert any("`input_ids` axis 1 8-16 is -1 in Triton" in note for note in summary.notes), summary.notes

    loaded = ait.load(tiny_bert(), tmp_path / "ckpt")
    for batch, length, seed in ((1, 8, 10), (3, 12, 11), (4, 16, 12)):
        ids, mask = tokens(batch, length, seed)
        served = run_from_repository(folder, config, [ids, mask])
        with torch.no_grad():
            expected = loaded(input_ids=ids, attention_mask=mask)
        for got, want in zip(served, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
