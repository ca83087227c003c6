"""Configs, keys, availability and import cost: everything that must hold without compiling."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BackendState, UnsafeOptionError
from aitune_core.testing.child_process import run_python
from aitune_inductor import (
    TorchInductorAotBackend,
    TorchInductorAotBackendConfig,
    TorchInductorJitBackend,
    TorchInductorJitBackendConfig,
    availability,
)
from aitune_inductor.config_checks import INDUCTOR_OPTION_RULES, INDUCTOR_OPTIONS


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
    in_order = TorchInductorJitBackend(options={"cpp.threads": 1, "freezing": True})
    reordered = TorchInductorJitBackend(options={"freezing": True, "cpp.threads": 1})
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


def test_import_compiles_nothing() -> None:
    """Importing the plugin (and its entry point) pulls in neither Inductor nor Dynamo."""
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "import aitune_inductor, aitune_inductor.plugin\n"
        "heavy = sorted(m for m in set(sys.modules) - before if m.startswith(('torch._inductor', 'torch._dynamo',"
        " 'torch.export', 'triton')))\n"
        "print(heavy)\n"
    )
    completed = run_python(code, "aitune_inductor")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------------------- allow-listed options
DANGEROUS_OPTIONS = [
    ("cpp.cxx", "g++", "it names a program"),
    ("cpp.enable_floating_point_contract_flag", "off -wrapper sh", "compiler's command line"),
    ("cpp.march", "native", "compiler's command line"),
    ("aot_inductor.compile_wrapper_opt_level", "O3", "compiler's command line"),
    ("aot_inductor.output_path", "/tmp/out.so", "it names a path"),
    ("aot_inductor.custom_op_libs", "libx.so", "library"),
    ("trace.debug_dir", "/tmp", "it names a directory"),
    ("cuda.cutlass_dir", "/tmp", "it names a directory"),
    ("cutlass.cutlass_hash_with_compile_cmd", True, "it is a command"),
    ("post_grad_custom_post_pass", "os.system", "custom pass"),
    ("custom_partitioner_fn", "os.system", "callable"),
    ("inductor_choices_class", "os.system", "class"),
    ("debug", True, "not on the list"),
]


@pytest.mark.parametrize(("key", "value", "why"), DANGEROUS_OPTIONS, ids=[key for key, _, _ in DANGEROUS_OPTIONS])
@pytest.mark.parametrize("field", ["options", "inductor_configs"])
def test_options_off_the_allow_list_are_refused_naming_the_key(key: str, value: Any, why: str, field: str) -> None:
    assert key in torch._inductor.list_options()
    config_class = TorchInductorJitBackendConfig if field == "options" else TorchInductorAotBackendConfig
    with pytest.raises(UnsafeOptionError, match=rf"{field}\['{re.escape(key)}'\] is not an allowed Inductor option: "):
        config_class(**{field: {key: value}})
    with pytest.raises(UnsafeOptionError, match=f"{re.escape(why)}.*unsafe_options=True"):
        config_class(**{field: {key: value}})


def test_the_allow_list_holds_only_safe_options_of_this_torch() -> None:
    installed = set(torch._inductor.list_options())
    for key in INDUCTOR_OPTION_RULES:
        assert key in installed, f"{key} is not an Inductor option of torch {torch.__version__}"
        assert INDUCTOR_OPTIONS.refusal(key).startswith("it is not on the list"), f"{key} looks unsafe"
    for forbidden in ("cpp.cxx", "cpp.enable_floating_point_contract_flag", "aot_inductor.output_path"):
        assert forbidden not in INDUCTOR_OPTION_RULES


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_autotune": "yes"}, r"options\['max_autotune'\] must be True or False"),
        ({"cpp.threads": True}, r"options\['cpp.threads'\] must be a whole number from -1"),
        ({"cpp.simdlen": 4096}, r"options\['cpp.simdlen'\] must be a whole number from 0 to 1024"),
        ({"max_autotune_gemm_search_space": "ALL"}, r"must be one of 'DEFAULT', 'EXHAUSTIVE'"),
    ],
)
def test_allowed_options_have_typed_values(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsafeOptionError, match=message):
        TorchInductorJitBackendConfig(options=options)


def test_mode_must_be_one_of_torch_compiles_modes() -> None:
    for mode in torch._inductor.list_mode_options():
        assert TorchInductorJitBackendConfig(mode=mode).mode == mode
    with pytest.raises(ValueError, match="mode must be None or one of default"):
        TorchInductorJitBackendConfig(mode="fastest")
    with pytest.raises(ValueError, match="mode must be None or one of"):
        TorchInductorJitBackendConfig(mode=1)  # type: ignore[arg-type]


def test_unsafe_options_in_code_are_used_but_never_loaded() -> None:
    backend = TorchInductorJitBackend(options={"cpp.cxx": "clang++"}, unsafe_options=True)
    assert backend.config.options == {"cpp.cxx": "clang++"}
    data = json.loads(json.dumps(backend.to_dict()))
    assert "unsafe_options" not in data["config"]
    assert backend.key() != TorchInductorJitBackend(options={"cpp.cxx": "g++"}, unsafe_options=True).key()
    with pytest.raises(ValueError, match=r"options\['cpp.cxx'\] is not an allowed Inductor option"):
        TorchInductorJitBackend.from_dict(data)
    aot = TorchInductorAotBackend(inductor_configs={"aot_inductor.output_path": "/x"}, unsafe_options=True)
    aot_data = {**json.loads(json.dumps(aot.to_dict())), "artifacts": {"package": "/nowhere/inductor-aot.pt2"}}
    with pytest.raises(ValueError, match=r"inductor_configs\['aot_inductor.output_path'\]"):
        TorchInductorAotBackend.from_dict(aot_data)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"fullgraph": "yes"}, "expected true or false, got str 'yes' @ config.fullgraph"),
        ({"dynamic": 1}, "expected true or false, got int 1 @ config.dynamic"),
        ({"mode": ["default"]}, "expected a string, got list"),
        ({"autocast_dtype": "torch.int32"}, "autocast_dtype"),
        ({"options": {"cpp.threads": "4"}}, r"options\['cpp.threads'\] must be a whole number"),
    ],
)
def test_stored_configs_of_the_wrong_type_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TorchInductorJitBackend.from_dict({"config": config})
