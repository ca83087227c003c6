"""Which ONNX Runtime provider options a config, and so a checkpoint, may set.

Provider options are a free-form mapping ONNX Runtime parses itself, and some of them
load code or touch files: ``trt_extra_plugin_lib_paths`` and
``trt_engine_decryption_lib_path`` load shared libraries, ``trt_engine_cache_path``
makes the TensorRT provider load serialized engines (native code) from a folder,
``user_compute_stream`` is a raw pointer. A checkpoint rebuilds its config from data,
so only the options below are accepted, each with the rule of its value (ONNX Runtime
takes values as text, so ``"1"`` is a valid switch and ``"1024"`` a valid number).
Anything else needs ``unsafe_options=True`` in code (never stored in checkpoints).
"""

from __future__ import annotations

from typing import Any

from aitune_core.plugin_api import AllowList, BoolRule, ChoiceRule, IntRule, OptionRule

_ON = BoolRule()
_DEVICE = IntRule(0, 1023)
_BYTES = IntRule(1, (1 << 64) - 1)

_REFUSALS: tuple[tuple[str, str], ...] = (
    ("*_name", "it names a file"),
    ("*_lib*", "it names a library that ONNX Runtime loads"),
    ("*plugin*", "it names a plugin library that TensorRT loads"),
    ("*path*", "it names a path"),
    ("*dir*", "it names a directory"),
    ("*folder*", "it names a directory"),
    ("*file*", "it names a file"),
    ("*calibration*", "it makes the provider read a calibration table file"),
    ("*cache*", "it makes the provider read or write files (engine caches hold native code)"),
    ("*user_compute_stream", "it is a raw pointer into this process"),
    ("gpu_external_*", "it is a raw pointer into this process"),
    ("*dump*", "it writes files"),
    ("*decryption*", "it loads a decryption library"),
    ("*ep_context*", "it reads or writes an EP context model file"),
)

CUDA_OPTION_RULES: dict[str, OptionRule] = {
    "device_id": _DEVICE,
    "gpu_mem_limit": _BYTES,
    "arena_extend_strategy": ChoiceRule(("kNextPowerOfTwo", "kSameAsRequested")),
    "cudnn_conv_algo_search": ChoiceRule(("EXHAUSTIVE", "HEURISTIC", "DEFAULT")),
    "do_copy_in_default_stream": _ON,
    "cudnn_conv_use_max_workspace": _ON,
    "cudnn_conv1d_pad_to_nc1d": _ON,
    "enable_cuda_graph": _ON,
    "enable_skip_layer_norm_strict_mode": _ON,
    "use_tf32": _ON,
    "prefer_nhwc": _ON,
    "fuse_conv_bias": _ON,
    "tunable_op_enable": _ON,
    "tunable_op_tuning_enable": _ON,
    "tunable_op_max_tuning_duration_ms": IntRule(0, 3_600_000),
}
"""CUDA execution provider options a checkpoint may set."""

TENSORRT_OPTION_RULES: dict[str, OptionRule] = {
    "device_id": _DEVICE,
    "trt_max_workspace_size": _BYTES,
    "trt_max_partition_iterations": IntRule(1, 1_000_000),
    "trt_min_subgraph_size": IntRule(1, 1_000_000),
    "trt_fp16_enable": _ON,
    "trt_bf16_enable": _ON,
    "trt_int8_enable": _ON,
    "trt_dla_enable": _ON,
    "trt_dla_core": IntRule(0, 15),
    "trt_force_sequential_engine_build": _ON,
    "trt_context_memory_sharing_enable": _ON,
    "trt_layer_norm_fp32_fallback": _ON,
    "trt_build_heuristics_enable": _ON,
    "trt_sparsity_enable": _ON,
    "trt_builder_optimization_level": IntRule(0, 5),
    "trt_auxiliary_streams": IntRule(-1, 64),
    "trt_cuda_graph_enable": _ON,
    "trt_detailed_build_log": _ON,
    "trt_engine_hw_compatible": _ON,
}
"""TensorRT execution provider options a checkpoint may set. Engine and timing caches
are left out: they read files from a folder, and an engine is native code."""


def _allow_list(provider: str, rules: dict[str, OptionRule], listed_at: str) -> AllowList:
    return AllowList(
        what=f"{provider} execution provider option",
        rules=rules,
        refusals=_REFUSALS,
        text_values=True,
        listed_at=listed_at,
    )


PROVIDER_OPTIONS: dict[str, AllowList] = {
    "cpu": _allow_list("CPU", {}, "the CPU provider takes none"),
    "cuda": _allow_list("CUDA", CUDA_OPTION_RULES, "aitune_onnx.provider_options.CUDA_OPTION_RULES"),
    "tensorrt": _allow_list("TensorRT", TENSORRT_OPTION_RULES, "aitune_onnx.provider_options.TENSORRT_OPTION_RULES"),
}
"""The allow-list of ``provider_options`` for each ``provider`` of the config."""


def provider_allow_list(config: Any) -> AllowList:
    """The allow-list for the config's provider (the CPU one, which takes none, for unknown ones)."""
    return PROVIDER_OPTIONS.get(getattr(config, "provider", "cpu"), PROVIDER_OPTIONS["cpu"])
