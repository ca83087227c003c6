"""The config: what each value means for lossiness, and what is refused before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitune_core.plugin_api import DEFAULT_TOLERANCES
from aitune_openvino import OpenVINOBackend, OpenVINOConfig
from aitune_openvino.availability import precision_availability
from aitune_openvino.runtime import resolve_hint, resolve_threads


def test_the_default_is_lossless_and_stores_float32_weights() -> None:
    config = OpenVINOConfig()
    assert (config.inference_precision, config.compress_to_fp16) == ("f32", False)
    backend = OpenVINOBackend()
    assert not backend.lossy
    assert backend.default_tolerances().by_dtype == {}  # tuning's own float32 tolerances


@pytest.mark.parametrize(
    ("settings", "lossy"),
    [
        ({}, False),
        ({"inference_precision": "bf16"}, True),
        ({"inference_precision": "f16"}, True),
        ({"compress_to_fp16": True}, True),
        ({"performance_hint": "throughput", "num_threads": 4, "converter": "trace"}, False),
    ],
)
def test_reduced_precision_is_lossy(settings: dict[str, object], lossy: bool) -> None:
    backend = OpenVINOBackend(**settings)
    assert backend.lossy is lossy
    widened = backend.default_tolerances().by_dtype
    assert bool(widened) is lossy
    if lossy:
        import torch

        assert widened[torch.float32].atol > DEFAULT_TOLERANCES[torch.float32].atol


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"inference_precision": "fp32"}, ValueError),
        ({"performance_hint": "fast"}, ValueError),
        ({"converter": "onnx"}, ValueError),
        ({"num_threads": -1}, ValueError),
        ({"num_threads": True}, ValueError),
        ({"num_threads": 1.5}, ValueError),
        ({"trace_fallback": "yes"}, TypeError),
        ({"compress_to_fp16": 1}, TypeError),
        ({"inference_precision": 32}, TypeError),
    ],
)
def test_bad_values_are_refused(settings: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error, match=next(iter(settings))):
        OpenVINOBackend(**settings)


def test_keys_follow_the_config() -> None:
    assert OpenVINOBackend().key() == OpenVINOBackend().key()
    assert OpenVINOBackend().key() != OpenVINOBackend(inference_precision="bf16").key()
    assert OpenVINOBackend(num_threads=2).describe() == "OpenVINOBackend(num_threads=2)"


def test_auto_hint_is_latency_for_batch_one_and_throughput_above() -> None:
    auto = OpenVINOConfig(performance_hint="auto")
    assert [resolve_hint(auto, batch) for batch in (None, 1, 2, 64)] == [
        "latency",
        "latency",
        "throughput",
        "throughput",
    ]
    assert resolve_hint(OpenVINOConfig(), 64) == "latency"
    assert resolve_hint(OpenVINOConfig(performance_hint="throughput"), 1) == "throughput"


def test_threads_follow_torch_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    assert resolve_threads(OpenVINOConfig()) == 3
    assert resolve_threads(OpenVINOConfig(num_threads=1)) == 1
    assert resolve_threads(OpenVINOConfig(num_threads=0)) == 0


def test_precision_availability_reads_the_cpu_flags(tmp_path: Path) -> None:
    with_bf16 = tmp_path / "bf16"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert precision_availability("bf16", with_bf16).available
    assert not precision_availability("f16", with_bf16).available
    refused = precision_availability("bf16", without)
    assert not refused.available and "avx512_bf16" in refused.reason
    assert precision_availability("f32", without).available
    assert not precision_availability("bf16", tmp_path / "missing").available
