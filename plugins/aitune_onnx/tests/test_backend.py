"""The backend itself: IOBinding, correctness at the extremes, data-dependent outputs,
baked constants, session options, external data after a move, and availability."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext, walk_outputs
from aitune_core.plugin_api.exported import ConstantMismatchError
from aitune_core.testing.recording import at_shape
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow


def _assert_equal_outputs(actual: Any, expected: Any) -> None:
    """Same structure, same non-tensor leaves, tensors close."""
    got, want = list(walk_outputs(actual)), list(walk_outputs(expected))
    assert [loc.display_path for loc, _ in got] == [loc.display_path for loc, _ in want]
    assert type(actual) is type(expected)
    for (_, value), (locator, wanted) in zip(got, want, strict=True):
        if isinstance(wanted, torch.Tensor):
            torch.testing.assert_close(value, wanted, rtol=1e-4, atol=1e-5, msg=locator.display_path)
        else:
            assert value == wanted, locator.display_path


@pytest.fixture(scope="module")
def nested_backend(nested_context: BuildContext) -> Iterator[ONNXRuntimeBackend]:
    backend = ONNXRuntimeBackend().build(nested_context)
    yield backend
    backend.deactivate()


@pytest.mark.parametrize("which", ["min", "opt", "max"])
def test_matches_eager_with_nested_inputs_and_outputs(
    nested_backend: ONNXRuntimeBackend, nested_context: BuildContext, which: str
) -> None:
    args, kwargs = at_shape(nested_context, which)
    with torch.no_grad():
        expected = nested_context.module(*args, **kwargs)
    actual = nested_backend(*args, **kwargs)
    assert isinstance(actual, dict) and isinstance(actual["extra"], tuple) and actual["tag"] == "nested"
    _assert_equal_outputs(actual, expected)


def test_a_baked_constant_must_repeat(nested_backend: ONNXRuntimeBackend) -> None:
    x, pairs = torch.randn(3, 8), torch.randn(6, 3)
    nested_backend((x, {"pairs": pairs}), double=True)
    with pytest.raises(ConstantMismatchError, match="`double` is False, but the exported model has True baked in"):
        nested_backend((x, {"pairs": pairs}), double=False)


@pytest.fixture(scope="module")
def tagger_backend(tagger_context: BuildContext) -> Iterator[ONNXRuntimeBackend]:
    backend = ONNXRuntimeBackend(intra_op_num_threads=1, graph_optimization_level="extended").build(tagger_context)
    yield backend
    backend.deactivate()


@pytest.mark.parametrize("which", ["min", "opt", "max"])
def test_matches_eager_with_dynamic_sequence(
    tagger_backend: ONNXRuntimeBackend, tagger_context: BuildContext, which: str
) -> None:
    backend = tagger_backend
    args, kwargs = at_shape(tagger_context, which)
    with torch.no_grad():
        expected = tagger_context.module(*args, **kwargs)
    torch.testing.assert_close(backend(*args, **kwargs), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("io_binding", "expected"), [(None, ["run"]), (True, ["io_binding"])])
def test_cpu_calls_use_session_run_unless_binding_is_asked_for(
    tagger_backend: ONNXRuntimeBackend,
    tagger_context: BuildContext,
    monkeypatch: pytest.MonkeyPatch,
    io_binding: bool | None,
    expected: list[str],
) -> None:
    backend = tagger_backend
    if io_binding is not None:
        backend = ONNXRuntimeBackend(
            intra_op_num_threads=1, graph_optimization_level="extended", io_binding=io_binding
        ).build(tagger_context)
    assert backend.config.io_binding is io_binding
    session = backend.session
    calls: list[str] = []
    real_binding, real_run = session.io_binding, session.run

    def io_binding_call() -> Any:
        calls.append("io_binding")
        return real_binding()

    def run(*args: Any, **kwargs: Any) -> Any:
        calls.append("run")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(session, "io_binding", io_binding_call)
    monkeypatch.setattr(session, "run", run)
    tokens, mask = torch.randn(3, 4, 8), torch.ones(3, 4)
    out = backend(tokens, mask)
    assert calls == expected
    with torch.no_grad():
        torch.testing.assert_close(out, tagger_context.module(tokens, mask), rtol=1e-4, atol=1e-5)
    # Inputs that are not contiguous are passed as a contiguous copy.
    strided = torch.randn(3, 8, 4).transpose(1, 2)
    with torch.no_grad():
        torch.testing.assert_close(backend(strided, mask), tagger_context.module(strided, mask), rtol=1e-4, atol=1e-5)


def test_types_numpy_lacks_are_called_with_binding() -> None:
    from types import SimpleNamespace

    from aitune_onnx.session import numpy_holds

    def session(*types: str) -> Any:
        values = [SimpleNamespace(type=type_) for type_ in types]
        return SimpleNamespace(get_inputs=lambda: values[:1], get_outputs=lambda: values[1:])

    assert numpy_holds(session("tensor(float)", "tensor(int64)"))
    assert not numpy_holds(session("tensor(bfloat16)", "tensor(float)"))
    assert not numpy_holds(session("tensor(float)", "tensor(float8e4m3fn)"))


def test_session_options_are_applied(tagger_backend: ONNXRuntimeBackend) -> None:
    import onnxruntime

    backend = tagger_backend
    options = backend.session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert backend.session.get_providers() == ["CPUExecutionProvider"]
    assert backend.build_info["providers"] == "CPUExecutionProvider"
    assert backend.build_info["inputs"] == "tokens[0=batch, 1=tokens_dim1], mask[0=batch, 1=tokens_dim1]"


def test_without_io_binding(mlp_context: BuildContext) -> None:
    backend = ONNXRuntimeBackend(io_binding=False).build(mlp_context)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), mlp_context.module(x), rtol=1e-4, atol=1e-5)


def test_data_dependent_output_shapes(positive_context: BuildContext) -> None:
    backend = ONNXRuntimeBackend().build(positive_context)
    assert backend.build_info["data_dependent_outputs"] == "output_0"
    sizes = set()
    for x in (torch.randn(2, 5), torch.randn(8, 5), -torch.ones(3, 5), torch.ones(4, 5)):
        indices, doubled = backend(x)
        expected = positive_context.module(x)
        torch.testing.assert_close(indices, expected[0])
        torch.testing.assert_close(doubled, expected[1])
        sizes.add(indices.shape[0])
    assert {0, 20} <= sizes and len(sizes) >= 3


def test_external_data_survives_renamed_artifacts(mlp_context: BuildContext, tmp_path: Path) -> None:
    """A checkpoint puts each artifact in its own folder; the data file must still be found."""
    backend = ONNXRuntimeBackend(external_data="always").build(mlp_context)
    data = backend.to_dict()
    assert set(data["artifacts"]) == {"model", "external_data"}
    assert data["extra"]["external_data_location"] == "model.onnx.data"
    moved = {}
    for name, path in data["artifacts"].items():
        (tmp_path / name).mkdir()
        moved[name] = str(shutil.copy(path, tmp_path / name / f"renamed-{Path(path).name}"))
    restored = ONNXRuntimeBackend.from_dict({**data, "artifacts": moved})
    assert restored.state is BackendState.CHECKPOINT_LOADED
    restored.deploy()  # no context: the layout and signature come from the saved state
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(restored(x), mlp_context.module(x), rtol=1e-4, atol=1e-5)


def test_availability_on_this_machine() -> None:
    assert ONNXRuntimeBackend.availability("cpu").available
    assert ONNXRuntimeBackend().availability("cpu").available
    wrong = ONNXRuntimeBackend().availability("cuda")
    assert not wrong.available and "runs on cpu, not cuda" in wrong.reason
    assert "runs on cpu, cuda, not mps" in ONNXRuntimeBackend.availability("mps").reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reasons given on a machine without CUDA")
@pytest.mark.parametrize(
    ("provider", "name"), [("cuda", "CUDAExecutionProvider"), ("tensorrt", "TensorrtExecutionProvider")]
)
def test_gpu_providers_unavailable_with_reasons(provider: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    availability = ONNXRuntimeBackend(provider=provider).availability("cuda")
    assert not availability.available
    if name not in onnxruntime.get_available_providers():
        assert f"{name} is not in this onnxruntime build" in availability.reason
        assert "install onnxruntime-gpu" in availability.reason
    assert "no CUDA device" in availability.reason
    # With a GPU build of onnxruntime, the device is what is missing.
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [name, "CPUExecutionProvider"])
    assert ONNXRuntimeBackend(provider=provider).availability("cuda").reason == "no CUDA device"
    assert ONNXRuntimeBackend.availability("cuda").reason.endswith("no CUDA device")


def test_building_on_an_unavailable_provider_fails_early(mlp_context: BuildContext) -> None:
    backend = ONNXRuntimeBackend(provider="cuda")
    with pytest.raises(RuntimeError, match="cannot run on cpu: the cuda execution provider runs on cuda"):
        backend.build(mlp_context)
    assert backend.state is BackendState.INIT



def test_thread_pool_stops_spinning_when_a_run_returns(mlp_context: BuildContext) -> None:
    """Left spinning, the pool's worker held a core for ~30 ms after each run at two threads,
    slowing whatever torch ran next (eager, while profiling) about 2x."""
    default = ONNXRuntimeBackend().build(mlp_context).session.get_session_options()
    assert default.get_session_config_entry("session.force_spinning_stop") == "1"
    spinning = ONNXRuntimeBackend(spin_between_runs=True).build(mlp_context).session.get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration"):
        spinning.get_session_config_entry("session.force_spinning_stop")
