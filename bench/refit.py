"""Refit against rebuild: how long a backend takes to serve new weights, both ways, in one process.

For each backend that refits (ONNX Runtime, OpenVINO; AOT Inductor and TorchAO int8wo
with ``--backends inductor_aot,torchao``) and each model (a small ResNet-like
CNN with BatchNorms, and a tiny BERT when transformers is installed), the backend is
built once; then each round loads a differently seeded copy of the weights into the
model and times, in alternating order, ``backend.refit(model)`` and a rebuild (a fresh
backend built for the model: export or conversion included, since the new weights miss
the export cache). Reported: the median of each and their ratio, and the share of a
build spent mapping the weights (what refit costs at build time). Outputs are checked
against eager after every refit.

``python -m bench.refit [--rounds N] [--models cnn,bert] [--backends onnxruntime,openvino]``;
run it at idle priority beside other work (``chrt --idle 0``): only the ratios are
meant to be read.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from aitune_core.plugin_api import Backend, BuildContext
from aitune_core.testing.recording import at_shape, record


class _Block(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResNetLike(torch.nn.Module):
    """Four residual blocks at two widths, a BatchNorm after each convolution but the downsampling one."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU()
        )
        self.blocks = torch.nn.Sequential(
            _Block(32), _Block(32), torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), _Block(64), _Block(64)
        )
        self.head = torch.nn.Linear(64, 10)
        for module in self.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                with torch.no_grad():
                    module.weight.uniform_(0.5, 1.5)
                    module.bias.uniform_(-0.5, 0.5)
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(images)).mean((2, 3)))


def _cnn(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return ResNetLike().eval()


def _cnn_call(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randn(batch, 3, 32, 32),), {}


def _bert(seed: int) -> torch.nn.Module:
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=128,
    )
    return transformers.BertModel(config).eval()


def _bert_call(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    length = {1: 16, 4: 32}[batch]
    ids = torch.randint(0, 1000, (batch, length))
    return (), {"input_ids": ids, "attention_mask": torch.ones(batch, length, dtype=torch.long)}


MODELS: dict[str, tuple[Callable[[int], torch.nn.Module], Callable[[int], Any]]] = {
    "cnn": (_cnn, _cnn_call),
    "bert": (_bert, _bert_call),
}


def _backend(name: str) -> Backend:
    if name == "inductor_aot":
        from aitune_inductor import TorchInductorAotBackend

        return TorchInductorAotBackend()
    if name == "torchao":
        from aitune_torchao import TorchAOBackend

        return TorchAOBackend(preset="int8wo")
    if name == "onnxruntime":
        from aitune_onnx import ONNXRuntimeBackend

        return ONNXRuntimeBackend()
    from aitune_openvino import OpenVINOBackend

    return OpenVINOBackend()


def _first_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return value[0] if isinstance(value, (tuple, list)) else value.last_hidden_state


def _check(backend: Backend, context: BuildContext) -> float:
    args, kwargs = at_shape(context, "opt")
    with torch.no_grad():
        expected = _first_tensor(context.module(*args, **kwargs))
    return float((_first_tensor(backend(*args, **kwargs)) - expected).abs().max())


def measure(backend_name: str, model_name: str, rounds: int, folder: Path) -> dict[str, Any]:
    make, call = MODELS[model_name]
    context = record(make(0), call, (1, 4), folder / "cache")
    backend = _backend(backend_name).build(context)
    if not backend.can_refit():
        return {"backend": backend_name, "model": model_name, "note": backend.build_info.get("refit")}
    refits, rebuilds, errors = [], [], []
    for round_ in range(rounds):
        context.module.load_state_dict(make(round_ + 1).state_dict())
        for step in ("refit", "rebuild") if round_ % 2 == 0 else ("rebuild", "refit"):
            started = time.perf_counter()
            if step == "refit":
                backend.refit(context.module)
                refits.append(time.perf_counter() - started)
                errors.append(_check(backend, context))
            else:
                fresh = _backend(backend_name).build(context)
                rebuilds.append(time.perf_counter() - started)
                fresh.deactivate()
    refit_s, rebuild_s = statistics.median(refits), statistics.median(rebuilds)
    return {
        "backend": backend_name,
        "model": model_name,
        "refit ms": round(refit_s * 1e3, 1),
        "rebuild ms": round(rebuild_s * 1e3, 1),
        "refit/rebuild": round(refit_s / rebuild_s, 3),
        "max |refit - eager|": f"{max(errors):.1e}",
        "map": backend.build_info.get("refit"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.refit", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--models", default="cnn,bert")
    parser.add_argument("--backends", default="onnxruntime,openvino")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aitune-bench-refit-") as folder:
        for model in args.models.split(","):
            for backend in args.backends.split(","):
                rows.append(measure(backend, model, args.rounds, Path(folder) / f"{model}-{backend}"))
                print(rows[-1], flush=True)
    print(tabulate(rows, headers="keys"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
