"""Which profile a call picks, and how its tensors reach the engine and come back.

These tests drive :class:`aitune_trt.runner.TensorRTRunner` with a test double of the
engine (``RecordingEngine``). They check aitune-trt's orchestration (flattening the
call, choosing the optimization profile, preparing dtypes and layouts, casting and
nesting the outputs, refusing shapes outside every profile), not TensorRT: no engine
is built and no TensorRT kernel runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import ForwardSignature
from aitune_core.plugin_api.exported import IOLayout
from aitune_trt import OutOfProfileError, ProfileInput, TensorRTProfile
from aitune_trt.runner import TRT_DTYPES, TensorRTRunner, check_engine_profiles, torch_dtype
from aitune_trt.testing import ProfiledStandIn


class Model(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor], ids: torch.Tensor) -> dict[str, Any]:
        hidden = inputs["x"] * 2
        return {"hidden": hidden, "pooled": (hidden.sum(dim=1), ids + 1), "tag": "model"}


def _profile(source: str, batch: tuple[int, int, int], length: tuple[int, int, int]) -> TensorRTProfile:
    return TensorRTProfile(
        (
            ProfileInput('inputs["x"]', "inputs_x", (batch[0], 4), (batch[1], 4), (batch[2], 4)),
            ProfileInput("ids", "ids", (batch[0], length[0]), (batch[1], length[1]), (batch[2], length[2])),
        ),
        source,
    )


PROFILES = [_profile("config", (1, 2, 2), (1, 8, 16)), _profile("config", (3, 8, 8), (1, 8, 16))]


class RecordingEngine(ProfiledStandIn):
    """Stands in for a TensorRT engine: records what it is given and computes Model's outputs.

    It takes ``inputs_x`` in float16 and ``ids`` in int32 (as an engine built in half
    precision from int64 ids might) and returns float16 ``hidden``, so the runner's
    dtype handling shows.
    """

    def __init__(self, profiles: list[TensorRTProfile] = PROFILES, inputs: tuple[str, ...] = ("inputs_x", "ids")):
        super().__init__(profiles)
        self.input_names = list(inputs)
        self.output_names = ["output_hidden", "output_pooled_0", "output_pooled_1"]
        self.input_dtypes = {"inputs_x": torch.float16, "ids": torch.int32}
        self.output_dtypes = {
            "output_hidden": torch.float16,
            "output_pooled_0": torch.float32,
            "output_pooled_1": torch.int32,
        }
        self.device = torch.device("cpu")
        self.calls: list[tuple[int, dict[str, torch.Tensor]]] = []

    def run(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.calls.append((profile, dict(inputs)))
        x = inputs["inputs_x"].float()
        hidden = x * 2
        ids = inputs.get("ids", torch.zeros(x.shape[0], 1, dtype=torch.int32))
        return {"output_hidden": hidden.half(), "output_pooled_0": hidden.sum(dim=1), "output_pooled_1": ids + 1}


def _runner(engine: RecordingEngine) -> TensorRTRunner:
    signature = ForwardSignature(Model().forward)
    arguments = {"inputs": {"x": torch.randn(2, 4)}, "ids": torch.arange(6).view(2, 3)}
    layout = IOLayout.of_call(arguments, Model()(**arguments), signature)
    assert layout.input_names == ["inputs_x", "ids"]
    assert layout.output_names == ["output_hidden", "output_pooled_0", "output_pooled_1"]
    return TensorRTRunner(layout, signature, PROFILES, engine, [torch.float32, torch.float32, torch.int64])


def _call(batch: int, length: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    return {"x": torch.randn(batch, 4)}, torch.arange(batch * length).view(batch, length)


@pytest.mark.parametrize(("batch", "profile"), [(1, 0), (2, 0), (3, 1), (8, 1)])
def test_each_call_runs_with_the_profile_that_takes_its_shapes(batch: int, profile: int) -> None:
    engine = RecordingEngine()
    runner = _runner(engine)
    inputs, ids = _call(batch, 5)
    runner(inputs, ids=ids)
    assert [index for index, _ in engine.calls] == [profile]
    assert runner.last_profile == profile


def test_a_sequence_of_calls_switches_between_profiles() -> None:
    engine = RecordingEngine()
    runner = _runner(engine)
    for batch in (2, 5, 1, 8, 2):
        runner(*_call(batch, 3))
    assert [index for index, _ in engine.calls] == [0, 1, 0, 1, 0]


def test_a_call_outside_every_profile_never_reaches_the_engine() -> None:
    engine = RecordingEngine()
    runner = _runner(engine)
    with pytest.raises(OutOfProfileError, match=r"ids=\[2, 17\]"):
        runner(*_call(2, 17))
    with pytest.raises(OutOfProfileError, match=r"inputs\[\"x\"\]=\[9, 4\]"):
        runner(*_call(9, 3))
    assert engine.calls == []


def test_inputs_reach_the_engine_in_its_dtypes_and_contiguous() -> None:
    engine = RecordingEngine()
    runner = _runner(engine)
    x = torch.randn(4, 2).t()  # (2, 4), not contiguous
    runner({"x": x}, ids=torch.arange(6).view(2, 3))
    (_, fed), *_ = engine.calls
    assert fed["inputs_x"].dtype == torch.float16 and fed["inputs_x"].is_contiguous()
    assert fed["ids"].dtype == torch.int32
    torch.testing.assert_close(fed["inputs_x"].float(), x.half().float())


def test_outputs_come_back_nested_and_in_the_recorded_dtypes() -> None:
    engine = RecordingEngine()
    runner = _runner(engine)
    inputs, ids = _call(3, 2)
    result = runner(inputs, ids)
    assert set(result) == {"hidden", "pooled", "tag"} and result["tag"] == "model"
    assert result["hidden"].dtype == torch.float32  # the engine gave float16
    assert result["pooled"][1].dtype == torch.int64  # the engine gave int32
    torch.testing.assert_close(result["pooled"][1], ids + 1)
    torch.testing.assert_close(result["hidden"], (inputs["x"] * 2).half().float())


def test_inputs_the_engine_does_not_have_are_not_fed() -> None:
    """An exporter drops inputs the model never reads; the engine then has fewer inputs than the layout."""
    engine = RecordingEngine(inputs=("inputs_x",))
    runner = _runner(engine)
    runner(*_call(2, 3))
    (_, fed), *_ = engine.calls
    assert list(fed) == ["inputs_x"]


def test_an_engine_with_other_profiles_is_refused() -> None:
    other = [PROFILES[0], _profile("config", (3, 6, 8), (1, 8, 16))]
    with pytest.raises(RuntimeError, match=r"profile 1 of the engine gives input 'inputs_x' min/opt/max"):
        _runner(RecordingEngine(profiles=other))
    with pytest.raises(RuntimeError, match="the engine has 1 optimization profiles, but 2 are recorded"):
        _runner(RecordingEngine(profiles=PROFILES[:1]))


def test_check_engine_profiles_accepts_matching_ones() -> None:
    check_engine_profiles(RecordingEngine(), PROFILES)


def test_an_engine_missing_an_output_is_refused() -> None:
    engine = RecordingEngine()
    engine.output_names = engine.output_names[:2]
    with pytest.raises(RuntimeError, match="lacks outputs"):
        _runner(engine)


def test_tensorrt_type_names_map_to_torch() -> None:
    assert torch_dtype("HALF", "x") is torch.float16
    assert torch_dtype("BF16", "x") is torch.bfloat16
    assert set(TRT_DTYPES) >= {"FLOAT", "HALF", "BF16", "INT8", "INT32", "INT64", "BOOL", "UINT8"}
    with pytest.raises(TypeError, match="engine tensor 'x' has TensorRT type INT4"):
        torch_dtype("INT4", "x")
