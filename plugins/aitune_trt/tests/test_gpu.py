"""Real TensorRT engines on a CUDA device: build, profiles, precisions, outputs, CUDA graphs, checkpoints.

Everything here needs TensorRT and a CUDA device and is skipped without them; run it
with ``pytest -m gpu plugins/aitune_trt`` (``scripts/gpu_check.sh`` does). Builds use
``optimization_level=0`` where speed of the engine does not matter, so that the file
runs in minutes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import BATCH_SIZE_KEY, ProfileConfig, global_context
from aitune_core.plugin_api import BackendState, BuildContext, to_device, walk_outputs
from aitune_core.testing import BackendConformance
from aitune_core.testing.engine import ShapeChoice
from aitune_trt import OutOfProfileError, TensorRTBackend, TensorRTBuildError
from aitune_trt.backend import PLAN_FILE, TIMING_CACHE_FILE

READY = TensorRTBackend.availability("cuda").available
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not READY, reason="needs TensorRT and a CUDA device")]

FAST_BUILD: dict[str, Any] = {"optimization_level": 0}
SHAPES: tuple[ShapeChoice, ...] = ("min", "opt", "max")
_names = itertools.count()


def record_on_cuda(
    model: torch.nn.Module,
    make_inputs: Callable[[int], tuple[Any, ...]],
    batch_sizes: tuple[int, ...],
    cache_dir: Path,
    samples: int = 1,
) -> BuildContext:
    from aitune_core.plugin_api import config

    config.max_num_samples_stored = samples
    device = torch.device("cuda")
    model = model.eval().to(device)
    wrapped = ait.Module(model, f"trt-gpu-{next(_names)}")
    with torch.no_grad():
        for batch_size in batch_sizes:
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                wrapped(*[value.to(device) for value in make_inputs(batch_size)])
    (graph,) = wrapped.graphs.values()
    return BuildContext(model, wrapped.name, graph.spec, graph.samples, device, cache_dir, wrapped.signature)


def assert_close(actual: Any, expected: Any, rtol: float = 1e-3, atol: float = 1e-4) -> None:
    got = [leaf for _, leaf in walk_outputs(actual)]
    wanted = [leaf for _, leaf in walk_outputs(expected)]
    assert len(got) == len(wanted)
    for left, right in zip(got, wanted, strict=True):
        if isinstance(right, torch.Tensor):
            torch.testing.assert_close(left, right, rtol=rtol, atol=atol)
        else:
            assert left == right


def check_extremes(context: BuildContext, backend: TensorRTBackend, rtol: float = 1e-3, atol: float = 1e-4) -> None:
    for which in SHAPES:
        arguments = context.graph_spec.input_spec.make_shape(context.samples[0].arguments, which)
        args, kwargs = context.signature.bind(to_device(arguments, context.device))
        with torch.no_grad():
            assert_close(backend(*args, **kwargs), context.module(*args, **kwargs), rtol, atol)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        hidden = torch.tanh(self.proj(self.embed(ids))) * mask.unsqueeze(-1)
        return {"hidden": hidden, "pooled": (hidden.sum(dim=1), mask.sum(dim=1))}


class Positive(torch.nn.Module):
    """Data-dependent output size: the indices of the positive entries."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nonzero(x > 0), x * 2


def tagger_inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = {2: 5, 4: 17, 8: 9}[batch]
    return torch.randint(0, 100, (batch, length)), (torch.rand(batch, length) > 0.2).float()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    return record_on_cuda(MLP(), lambda b: (torch.randn(b, 16),), (1, 4, 16), tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    return record_on_cuda(Tagger(), tagger_inputs, (2, 4, 8), tmp_path_factory.mktemp("tagger"), samples=3)


def fresh(context: BuildContext, folder: Path) -> BuildContext:
    return BuildContext(
        context.module, context.module_name, context.graph_spec, context.samples, context.device, folder,
        context.signature,
    )  # fmt: skip


# ---------------------------------------------------------------------- builds and profiles
def test_fp32_engine_matches_eager_and_keeps_a_timing_cache(mlp: BuildContext, tmp_path: Path) -> None:
    backend = TensorRTBackend(**FAST_BUILD).build(fresh(mlp, tmp_path))
    check_extremes(mlp, backend)
    assert (tmp_path / PLAN_FILE).is_file() and (tmp_path / TIMING_CACHE_FILE).is_file()
    assert backend.build_info["precision"].startswith("fp32")
    print("built:", backend.build_info)


def test_sample_profiles_switch_per_call(tagger: BuildContext, tmp_path: Path) -> None:
    backend = TensorRTBackend(profile_source="samples", **FAST_BUILD).build(fresh(tagger, tmp_path))
    assert [p.source for p in backend.profiles] == ["sample", "sample", "sample", "graph"]
    runner = backend.runner
    assert runner is not None
    used = []
    for batch in (2, 4, 8, 2):
        ids, mask = (value.cuda() for value in tagger_inputs(batch))
        with torch.no_grad():
            assert_close(backend(ids, mask), tagger.module(ids, mask))
        used.append(runner.last_profile)
    ids, mask = torch.randint(0, 100, (3, 11), device="cuda"), torch.ones(3, 11, device="cuda")
    with torch.no_grad():
        assert_close(backend(ids, mask), tagger.module(ids, mask))
    used.append(runner.last_profile)
    assert used == [0, 1, 2, 0, 3]
    check_extremes(tagger, backend)


def test_narrow_profiles_refuse_other_shapes(mlp: BuildContext, tmp_path: Path) -> None:
    backend = TensorRTBackend(profiles=[{"x": ([1, 16], [4, 16], [4, 16])}], cover_tuned_range=False, **FAST_BUILD)
    backend.build(fresh(mlp, tmp_path))
    backend(torch.randn(2, 16, device="cuda"))
    with pytest.raises(OutOfProfileError):
        backend(torch.randn(8, 16, device="cuda"))


@pytest.mark.parametrize("strongly_typed", [None, True])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precisions(mlp: BuildContext, tmp_path: Path, precision: str, strongly_typed: bool | None) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    backend = TensorRTBackend(precision=precision, strongly_typed=strongly_typed, **FAST_BUILD)
    backend.build(fresh(mlp, tmp_path))
    tolerance = backend.default_tolerances().for_dtype(torch.float32)
    check_extremes(mlp, backend, tolerance.rtol, tolerance.atol)
    print(precision, strongly_typed, "->", backend.build_info["precision"])


def test_data_dependent_outputs_use_the_output_allocator(tmp_path: Path) -> None:
    context = record_on_cuda(Positive(), lambda b: (torch.randn(b, 5),), (2, 4, 8), tmp_path / "record")
    backend = TensorRTBackend(**FAST_BUILD).build(fresh(context, tmp_path / "build"))
    for batch in (2, 3, 8):
        x = torch.randn(batch, 5, device="cuda")
        indices, doubled = backend(x)
        assert indices.dtype == torch.int64
        torch.testing.assert_close(indices, torch.nonzero(x > 0))
        torch.testing.assert_close(doubled, x * 2)


def test_runs_on_the_current_stream(tagger: BuildContext, tmp_path: Path) -> None:
    backend = TensorRTBackend(**FAST_BUILD).build(fresh(tagger, tmp_path))
    stream = torch.cuda.Stream()
    ids, mask = (value.cuda() for value in tagger_inputs(4))
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        result = backend(ids, mask)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.no_grad():
        assert_close(result, tagger.module(ids, mask))


def test_cuda_graphs(tagger: BuildContext, tmp_path: Path) -> None:
    backend = TensorRTBackend(cuda_graphs=True, **FAST_BUILD).build(fresh(tagger, tmp_path))
    for batch in (2, 4, 2, 8, 4):
        ids, mask = (value.cuda() for value in tagger_inputs(batch))
        with torch.no_grad():
            assert_close(backend(ids, mask), tagger.module(ids, mask))


def test_cuda_graphs_refuse_data_dependent_outputs(tmp_path: Path) -> None:
    context = record_on_cuda(Positive(), lambda b: (torch.randn(b, 5),), (2, 4), tmp_path / "record")
    backend = TensorRTBackend(cuda_graphs=True, **FAST_BUILD).build(fresh(context, tmp_path / "build"))
    with pytest.raises(RuntimeError, match="data-dependent shape"):
        backend(torch.randn(2, 5, device="cuda"))


def test_a_broken_onnx_file_reports_the_parser_errors(tmp_path: Path) -> None:
    from aitune_trt import engine
    from aitune_trt.options import BuildOptions
    from aitune_trt.precision import plan_precision

    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an onnx model")
    options = BuildOptions((), plan_precision("fp32", None, False, engine.capabilities()))
    with pytest.raises(TensorRTBuildError) as raised:
        engine.build_serialized_engine(broken, options)
    assert raised.value.stage == "parse" and raised.value.parser_errors
    print(raised.value)


# ---------------------------------------------------------------------- checkpoints and tuning
def test_checkpoint_deploys_the_plan_without_building(tagger: BuildContext, tmp_path: Path) -> None:
    import json
    import shutil

    backend = TensorRTBackend(profile_source="samples", **FAST_BUILD).build(fresh(tagger, tmp_path / "build"))
    data = json.loads(json.dumps(backend.to_dict(), default=str))
    moved = tmp_path / "moved"
    moved.mkdir()
    for name, path in data["artifacts"].items():
        data["artifacts"][name] = str(shutil.copy(path, moved / Path(path).name))
    shutil.rmtree(tmp_path / "build")  # no ONNX file, no timing cache: nothing to build from
    restored = TensorRTBackend.from_dict(data)
    restored.deploy()
    assert restored.state is BackendState.DEPLOYED
    ids, mask = (value.cuda() for value in tagger_inputs(8))
    with torch.no_grad():
        assert_close(restored(ids, mask), tagger.module(ids, mask))


def test_tune_with_default_candidates_tries_tensorrt(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-trt", entry_points={"tensorrt": "aitune_trt.plugin"}))
    model = MLP().eval().cuda()
    wrapped = ait.Module(model, f"trt-gpu-tune-{next(_names)}")
    profile = ProfileConfig(warmup_iterations=2, window=8, min_time_s=0.01, max_time_s=0.1, max_batch_search=False)
    report = ait.tune(
        wrapped, [torch.randn(16) for _ in range(16)], batch_sizes=[1, 4, 8], device="cuda",
        strategy=ait.MaxThroughputStrategy(profile=profile),
    )  # fmt: skip
    print(report)
    (graph,) = report.graphs
    trt = [c for c in graph.candidates if c.backend == "TensorRTBackend()"]
    assert trt and trt[0].status in ("selected", "passed"), trt


# ---------------------------------------------------------------------- refit
class NormedCNN(torch.nn.Module):
    """A convolution with a BatchNorm that is not the identity: the ONNX export folds it into the convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_refittable_engine_takes_new_weights(tmp_path: Path, cuda_graphs: bool) -> None:
    torch.manual_seed(0)
    context = record_on_cuda(NormedCNN(), lambda b: (torch.randn(b, 3, 8, 8),), (1, 4), tmp_path / "record")
    backend = TensorRTBackend(refittable=True, cuda_graphs=cuda_graphs, **FAST_BUILD).build(fresh(context, tmp_path))
    assert backend.can_refit(), backend.refit_refusal
    check_extremes(context, backend)
    torch.manual_seed(1)
    context.module.load_state_dict(NormedCNN().cuda().state_dict())
    backend.refit(context.module)
    check_extremes(context, backend)
    restored = TensorRTBackend.from_dict(backend.to_dict())  # the plan written after the refit
    restored.deploy()
    check_extremes(context, restored)


def test_engines_built_without_refittable_refuse_refit(mlp: BuildContext, tmp_path: Path) -> None:
    from aitune_core.plugin_api import RefitError

    backend = TensorRTBackend(**FAST_BUILD).build(fresh(mlp, tmp_path))
    assert not backend.can_refit()
    with pytest.raises(RefitError, match="cannot take new weights"):
        backend.refit(mlp.module)


class TestTensorRTConformance(BackendConformance):
    device = "cuda"
    batch_sizes = (2, 4, 8)
    rtol, atol = 1e-3, 1e-4

    def make_backend(self) -> TensorRTBackend:
        return TensorRTBackend(**FAST_BUILD)

    def make_other_backend(self) -> TensorRTBackend:
        return TensorRTBackend(optimization_level=1)
