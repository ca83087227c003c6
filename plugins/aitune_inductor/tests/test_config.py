"""Configs, keys, availability and import cost: everything that must hold without compiling."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import torch

from aitune_core.backends.state import BackendState
from aitune_inductor import (
    TorchInductorAotBackend,
    TorchInductorAotBackendConfig,
    TorchInductorJitBackend,
    TorchInductorJitBackendConfig,
    availability,
)


def test_mode_and_options_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either mode or options, not both"):
        TorchInductorJitBackendConfig(mode="max-autotune", options={"max_autotune": True})
    assert TorchInductorJitBackendConfig(mode="max-autotune").options is None
    assert TorchInductorJitBackendConfig(options={"max_autotune": True}).mode is None


def test_options_must_be_saveable() -> None:
    with pytest.raises(TypeError, match="saved with the checkpoint"):
        TorchInductorJitBackend(options={"guard_filter_fn": lambda guards: guards})
    with pytest.raises(TypeError, match="option names"):
        TorchInductorAotBackendConfig(inductor_configs={1: True})


def test_options_are_copied() -> None:
    options = {"epilogue_fusion": False}
    config = TorchInductorJitBackendConfig(options=options)
    options["epilogue_fusion"] = True
    assert config.options == {"epilogue_fusion": False}


def test_keys_depend_on_the_config_only() -> None:
    assert TorchInductorJitBackend().key() == TorchInductorJitBackend().key()
    assert TorchInductorJitBackend().key().startswith("inductor_jit-")
    assert TorchInductorAotBackend().key().startswith("inductor_aot-")
    assert TorchInductorJitBackend(mode="max-autotune").key() != TorchInductorJitBackend().key()
    in_order = TorchInductorJitBackend(options={"a.b": 1, "c": True})
    reordered = TorchInductorJitBackend(options={"c": True, "a.b": 1})
    assert in_order.key() == reordered.key()


@pytest.mark.parametrize(
    "backend",
    [
        TorchInductorJitBackend(mode="reduce-overhead", autocast_enabled=True, autocast_dtype=torch.bfloat16),
        TorchInductorJitBackend(options={"max_autotune": True}, fullgraph=True, dynamic=False),
        TorchInductorAotBackend(strict=True, inductor_configs={"aot_inductor.debug_compile": False}),
    ],
    ids=["jit-mode", "jit-options", "aot"],
)
def test_config_survives_json(backend: TorchInductorJitBackend | TorchInductorAotBackend) -> None:
    data = json.loads(json.dumps({**backend.to_dict(), "artifacts": {}}))
    if isinstance(backend, TorchInductorAotBackend):
        data["artifacts"] = {"package": "/nowhere/inductor-aot.pt2"}
    restored = type(backend).from_dict(data)
    assert restored.config == backend.config
    assert restored.key() == backend.key()
    assert restored.state is BackendState.CHECKPOINT_LOADED


def test_is_jit() -> None:
    assert TorchInductorJitBackend().is_jit is True
    assert TorchInductorAotBackend().is_jit is False


@pytest.mark.parametrize("backend_class", [TorchInductorJitBackend, TorchInductorAotBackend])
def test_cpu_availability_follows_inductors_compiler_search(backend_class: type[TorchInductorJitBackend]) -> None:
    import torch._inductor.config as inductor_config

    found = availability._find_compiler(availability._configured_cxx())
    assert backend_class.availability("cpu").available is (found is not None)
    with inductor_config.patch({"cpp.cxx": (None, "no-such-compiler++")}):
        verdict = backend_class.availability("cpu")
    assert not verdict.available
    assert "no C++ compiler" in verdict.reason and "no-such-compiler++" in verdict.reason


@pytest.mark.parametrize("backend_class", [TorchInductorJitBackend, TorchInductorAotBackend])
def test_cuda_availability_reasons(
    backend_class: type[TorchInductorJitBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend_class.availability("cuda").reason == "no CUDA device"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(availability, "_triton_error", lambda: "ModuleNotFoundError: No module named 'triton'")
    verdict = backend_class.availability("cuda")
    assert not verdict.available and "triton not importable" in verdict.reason


def test_other_devices_are_refused() -> None:
    verdict = TorchInductorJitBackend.availability("mps")
    assert not verdict.available and "mps" in verdict.reason


def test_import_compiles_nothing(helpers: Any) -> None:
    """Importing the plugin (and its entry point) pulls in neither Inductor nor Dynamo."""
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "import aitune_inductor, aitune_inductor.plugin\n"
        "heavy = sorted(m for m in set(sys.modules) - before if m.startswith(('torch._inductor', 'torch._dynamo',"
        " 'torch.export', 'triton')))\n"
        "print(heavy)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=helpers.env_with_sources()
    )
    assert completed.stdout.strip().splitlines()[-1] == "[]"
