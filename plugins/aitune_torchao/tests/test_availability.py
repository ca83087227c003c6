"""Which presets can run where, and why not: judged without a GPU by faking what torch reports."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import pytest
import torch

from aitune_torchao import PRESETS, TorchAOBackend

CPU_PRESETS = ["int8wo", "int8dq"]


def fake_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], name: str = "Fake GPU") -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


def available(device: str) -> dict[str, str]:
    """Preset -> "" when available, else the reason."""
    result = {}
    for name in PRESETS:
        availability = TorchAOBackend(preset=name).availability(device)
        result[name] = "" if availability.available else availability.reason
    return result


def test_on_the_cpu_only_the_int8_presets_run() -> None:
    reasons = available("cpu")
    assert [name for name, reason in reasons.items() if not reason] == CPU_PRESETS
    assert reasons["fp8dq"] == "preset 'fp8dq' needs CUDA with compute capability >= 8.9, not cpu"
    assert reasons["int4wo"] == "preset 'int4wo' needs CUDA, not cpu"
    assert reasons["mxfp8"] == "preset 'mxfp8' needs CUDA with compute capability >= 10.0, not cpu"
    assert reasons["nvfp4"] == "preset 'nvfp4' needs CUDA with compute capability >= 10.0, not cpu"


def test_the_class_answers_for_torchao_itself() -> None:
    assert TorchAOBackend.availability("cpu").available
    assert TorchAOBackend.availability("mps").reason == "TorchAOBackend runs on cpu, cuda, not mps"


def test_without_a_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert TorchAOBackend.availability("cuda").reason == "no CUDA device"
    assert TorchAOBackend(preset="int8wo").availability("cuda").reason == "no CUDA device"


def test_an_ampere_gpu_runs_int8_but_not_float8(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, (8, 0), "NVIDIA A100")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mslk" else object())
    reasons = available("cuda")
    assert not reasons["int8wo"] and not reasons["int8dq"]
    assert reasons["fp8wo"] == "preset 'fp8wo' needs CUDA with compute capability >= 8.9; NVIDIA A100 has 8.0"
    assert reasons["int4wo"].startswith("preset 'int4wo' needs mslk (the CUDA int4 kernels")
    assert reasons["int4wo"].endswith("which is not installed")


def test_a_hopper_gpu_runs_float8_but_not_mx_or_nvfp4(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H100")
    reasons = available("cuda")
    assert not reasons["fp8wo"] and not reasons["fp8dq"]
    for name in ("mxfp8", "mxfp4", "nvfp4", "nvfp4wo"):
        assert reasons[name] == f"preset {name!r} needs CUDA with compute capability >= 10.0; NVIDIA H100 has 9.0"


PROTOTYPES = ("mxfp8", "mxfp4", "nvfp4", "nvfp4wo")


def test_a_blackwell_gpu_runs_the_prototype_presets_this_torchao_has(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(monkeypatch, (10, 0), "NVIDIA B200")
    reasons = available("cuda")
    for name in PROTOTYPES:
        if importlib.util.find_spec("numpy") is None:
            assert (
                reasons[name]
                == f"preset {name!r} needs numpy (torchao's MX/NVFP4 prototype imports it), which is not installed"
            )
        else:
            assert not reasons[name], reasons[name]


def test_the_prototypes_need_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao does not depend on numpy, but its MX/NVFP4 prototype imports it."""
    fake_gpu(monkeypatch, (10, 0), "NVIDIA B200")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else object())
    reasons = available("cuda")
    assert [name for name in PROTOTYPES if "needs numpy" in reasons[name]] == list(PROTOTYPES)
    assert not reasons["fp8dq"]


def test_a_prototype_missing_from_the_installed_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    mx = pytest.importorskip("torchao.prototype.mx_formats", reason="needs numpy")

    fake_gpu(monkeypatch, (10, 0))
    monkeypatch.delattr(mx, "NVFP4WeightOnlyConfig")
    reason = TorchAOBackend(preset="nvfp4wo").availability("cuda").reason
    version = importlib.metadata.version("torchao")
    assert reason == f"preset 'nvfp4wo': the installed torchao {version} has no NVFP4WeightOnlyConfig"


@pytest.mark.parametrize(
    ("installed", "reason"),
    [
        (None, "torchao is not installed; pip install torchao"),
        ("0.12.0", "torchao 0.12.0 is installed; aitune-torchao needs torchao>=0.18"),
    ],
)
def test_torchao_missing_or_too_old(monkeypatch: pytest.MonkeyPatch, installed: str | None, reason: str) -> None:
    real = importlib.metadata.version

    def version(name: str) -> Any:
        if name != "torchao":
            return real(name)
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert TorchAOBackend.availability("cpu").reason == reason
    assert TorchAOBackend(preset="int8wo").availability("cpu").reason == reason
