"""The config: provider options on an allow-list per provider, typed fields, strict loading; no export needed."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BackendState, UnsafeOptionError
from aitune_onnx import ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_onnx.provider_options import _REFUSALS, PROVIDER_OPTIONS
from aitune_onnx.session import _providers

ARTIFACTS = {"model": "/nowhere/model.onnx"}


def restored(data: dict[str, Any]) -> ONNXRuntimeBackend:
    return ONNXRuntimeBackend.from_dict({"config": data, "artifacts": ARTIFACTS, "extra": {}})


@pytest.mark.parametrize(
    ("provider", "options"),
    [
        ("cuda", {"device_id": 1, "gpu_mem_limit": 2 << 30, "cudnn_conv_algo_search": "HEURISTIC"}),
        ("cuda", {"arena_extend_strategy": "kSameAsRequested", "enable_cuda_graph": True, "use_tf32": "0"}),
        ("tensorrt", {"trt_fp16_enable": True, "trt_max_workspace_size": 1 << 30, "trt_builder_optimization_level": 5}),
        ("tensorrt", {"trt_int8_enable": "1", "trt_auxiliary_streams": -1, "device_id": 0}),
    ],
)
def test_allowed_provider_options_are_kept_as_text_and_survive_json(provider: str, options: dict[str, Any]) -> None:
    backend = ONNXRuntimeBackend(provider=provider, provider_options=options)
    assert backend.config.provider_options == {key: str(options[key]) for key in sorted(options)}
    again = restored(json.loads(json.dumps(backend.to_dict()["config"])))
    assert again.config == backend.config and again.key() == backend.key()
    assert again.state is BackendState.CHECKPOINT_LOADED


@pytest.mark.parametrize(
    ("provider", "key", "value", "why"),
    [
        ("tensorrt", "trt_engine_cache_path", "/tmp/engines", "it names a path"),
        ("tensorrt", "trt_engine_cache_enable", "1", "engine caches hold native code"),
        ("tensorrt", "trt_timing_cache_path", "/tmp", "it names a path"),
        ("tensorrt", "trt_extra_plugin_lib_paths", "/tmp/evil.so", "it names a library"),
        ("tensorrt", "trt_engine_decryption_lib_path", "/tmp/evil.so", "it names a library"),
        ("tensorrt", "trt_int8_calibration_table_name", "table", "it names a file"),
        ("tensorrt", "trt_onnx_model_folder_path", "/tmp", "it names a path"),
        ("cuda", "user_compute_stream", "140000000", "raw pointer"),
        ("cuda", "trt_fp16_enable", "1", "not on the list of CUDA execution provider options"),
        ("cpu", "device_id", "0", "the CPU provider takes none"),
    ],
)
def test_provider_options_off_the_allow_list_are_refused_naming_the_key(
    provider: str, key: str, value: str, why: str
) -> None:
    with pytest.raises(UnsafeOptionError, match=rf"provider_options\['{key}'\] is not an allowed .*{why}"):
        ONNXRuntimeBackendConfig(provider=provider, provider_options={key: value})


@pytest.mark.parametrize(
    ("provider", "options", "message"),
    [
        ("tensorrt", {"trt_builder_optimization_level": 6}, "must be a whole number from 0 to 5, got '6'"),
        ("tensorrt", {"trt_fp16_enable": "yes"}, "must be True or False, got 'yes'"),
        ("cuda", {"cudnn_conv_algo_search": "FASTEST"}, "must be one of 'EXHAUSTIVE', 'HEURISTIC', 'DEFAULT'"),
        ("cuda", {"gpu_mem_limit": 0}, "must be a whole number from 1"),
        ("cuda", {"device_id": "x"}, "must be a whole number"),
    ],
)
def test_allowed_provider_options_have_typed_values(provider: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsafeOptionError, match=message):
        ONNXRuntimeBackendConfig(provider=provider, provider_options=options)


def test_the_allow_lists_hold_nothing_that_names_a_file_or_library() -> None:
    for allow_list in PROVIDER_OPTIONS.values():
        for key in allow_list.rules:
            assert not any(fnmatch.fnmatchcase(key, pattern) for pattern, _ in _REFUSALS), key
            assert not any(word in key for word in ("path", "lib", "cache", "file", "dir")), key


def test_unsafe_provider_options_work_in_code_and_are_refused_at_load() -> None:
    backend = ONNXRuntimeBackend(
        provider="tensorrt", provider_options={"trt_engine_cache_path": "/tmp/engines"}, unsafe_options=True
    )
    assert _providers(backend.config, torch.device("cpu"))[0] == (
        "TensorrtExecutionProvider",
        {"trt_engine_cache_path": "/tmp/engines"},
    )
    data = json.loads(json.dumps(backend.to_dict()["config"]))
    assert "unsafe_options" not in data
    with pytest.raises(ValueError, match=r"provider_options\['trt_engine_cache_path'\] is not an allowed"):
        restored(data)
    with pytest.raises(ValueError, match="sets unsafe_options"):
        restored({**data, "unsafe_options": True})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"provider_options": {"device_id": 0}, "provider": "cuda"},
            r"expected a string, got int 0 @ config.provider_options\['device_id'\]",
        ),
        ({"io_binding": "false"}, "expected true or false, got str 'false' @ config.io_binding"),
        ({"intra_op_num_threads": 2.0}, "expected a whole number, got float 2.0 @ config.intra_op_num_threads"),
        ({"intra_op_num_threads": -1}, "intra_op_num_threads must be a whole number >= 0"),
        ({"provider": "rocm"}, "provider"),
        ({"opset_version": True}, "expected a whole number, got bool True @ config.opset_version"),
    ],
)
def test_stored_configs_of_the_wrong_type_are_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        restored(data)
