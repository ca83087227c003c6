"""The AOT backend: export dims from the graph, nested outputs, and a package that loads without compiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext
from aitune_core.testing.child_process import env_with_sources
from aitune_core.testing.recording import at_shape
from aitune_inductor import TorchInductorAotBackend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(two_inputs_context: BuildContext) -> Iterator[TorchInductorAotBackend]:
    backend = TorchInductorAotBackend().build(two_inputs_context)
    yield backend
    backend.deactivate()


def test_exports_one_shared_batch_dim(built: TorchInductorAotBackend) -> None:
    assert built.build_info["dims"] == ["x[0] = batch in [2, 8]", "y[0] = 2*batch in [4, 16]"]
    package = built.to_dict()["artifacts"]["package"]
    assert Path(package).is_file() and Path(package).suffix == ".pt2"
    assert built.context is not None and Path(package).parent == built.context.cache_dir


@pytest.mark.parametrize("which", ["min", "opt", "max"])
def test_matches_eager_with_nested_outputs(
    built: TorchInductorAotBackend, two_inputs_context: BuildContext, which: str
) -> None:
    args, kwargs = at_shape(two_inputs_context, which)
    with torch.no_grad():
        expected = two_inputs_context.module(*args, **kwargs)
    actual = built(*args, **kwargs)
    assert isinstance(actual, dict) and isinstance(actual["extra"], tuple)
    torch.testing.assert_close(actual, expected)


def test_any_call_form_of_the_graph(built: TorchInductorAotBackend, two_inputs_context: BuildContext) -> None:
    x, y = torch.randn(3, 8), torch.randn(6, 3)  # batch 3: in range, never recorded
    with torch.no_grad():
        expected = two_inputs_context.module(x, y)
    for args, kwargs in [((x, y), {}), ((x,), {"y": y}), ((), {"x": x, "y": y}), ((), {"y": y, "x": x})]:
        torch.testing.assert_close(built(*args, **kwargs), expected)


def test_non_contiguous_inputs(built: TorchInductorAotBackend, two_inputs_context: BuildContext) -> None:
    """A package reads inputs with the strides it was exported with; a slice must not give wrong numbers."""
    x, y = torch.randn(3, 16)[:, ::2], torch.randn(6, 6)[:, :3]
    assert not x.is_contiguous() and not y.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(built(x, y=y), two_inputs_context.module(x, y))


RESTORE_SCRIPT = """
import json, sys
import torch
import torch._inductor, torch.export
from torch._dynamo.utils import counters

def refuse(*args, **kwargs):
    raise AssertionError("restoring a package must not export or compile")

torch.export.export = refuse
torch._inductor.aoti_compile_and_package = refuse
torch._inductor.aot_compile = refuse
import torch._inductor.compile_fx as compile_fx
compile_fx.compile_fx = compile_fx.compile_fx_aot = refuse

from pathlib import Path
from aitune_core.testing.recording import record
from aitune_inductor import TorchInductorAotBackend

class TwoInputs(torch.nn.Module):  # the conftest's model: the package reads its weights
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        hidden = torch.relu(self.proj(x))
        pairs = y.view(x.shape[0], 2, -1).sum(dim=1)
        return {"hidden": hidden, "extra": (pairs * 2, hidden.mean())}

state = json.loads(open(sys.argv[1]).read())
io = torch.load(sys.argv[2], weights_only=True)
module = TwoInputs()
module.load_state_dict(io["weights"])
call = lambda batch: ((torch.randn(batch, 8), torch.randn(2 * batch, 3)), {})
context = record(module, call, (2,), Path(sys.argv[3]))
backend = TorchInductorAotBackend.from_dict(state)
assert backend.state.name == "CHECKPOINT_LOADED"
backend.{step}(context)
out = backend(io["x"], y=io["y"])
torch.testing.assert_close(out, io["expected"])
assert isinstance(out, dict) and isinstance(out["extra"], tuple)
assert not counters["inductor"], dict(counters["inductor"])
print("restored", backend.state.name)
"""


@pytest.mark.parametrize("step", ["activate", "deploy"])
def test_restores_in_a_fresh_process_without_compiling(
    built: TorchInductorAotBackend, two_inputs_context: BuildContext, tmp_path: Path, step: str
) -> None:
    moved = tmp_path / "checkpoint" / "model.pt2"
    moved.parent.mkdir()
    assert built.package_path is not None
    moved.write_bytes(built.package_path.read_bytes())
    state = built.to_dict()
    state["artifacts"] = {"package": str(moved)}
    (tmp_path / "state.json").write_text(json.dumps(state))
    x, y = torch.randn(5, 8), torch.randn(10, 3)
    with torch.no_grad():
        expected = two_inputs_context.module(x, y)
    torch.save(
        {"x": x, "y": y, "expected": expected, "weights": two_inputs_context.module.state_dict()}, tmp_path / "io.pt"
    )
    script = tmp_path / "restore.py"
    script.write_text(textwrap.dedent(RESTORE_SCRIPT).replace("{step}", step))
    completed = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "state.json"), str(tmp_path / "io.pt"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env_with_sources("aitune_inductor"),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().endswith(
        f"restored {BackendState.ACTIVE.name if step == 'activate' else 'DEPLOYED'}"
    )


def test_deactivate_then_activate_reloads_the_package(
    built: TorchInductorAotBackend, two_inputs_context: BuildContext
) -> None:
    built.deactivate()
    assert built._model is None
    built.activate()
    x, y = torch.randn(2, 8), torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(built(x, y), two_inputs_context.module(x, y))


def test_batch_range_ending_at_a_model_size_stays_correct(tmp_path: Path) -> None:
    """A batch range ending at the model's channel count (16 here): exporting with batch 16 as
    the example let the package alias the batch with the channels, and batch 1 came back as
    16 rows of NaN. The example batch is now a size no model dimension is likely to have."""
    import aitune_core as ait

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 3)
    ).eval()
    module = ait.Module(model, "aot-batch-at-channels")
    ait.config.cache_dir = tmp_path
    try:
        strategy = ait.FirstWinsStrategy([TorchInductorAotBackend()]).enable_performance_validation(False)
        report = ait.tune(module, [torch.randn(3, 8, 8) for _ in range(4)], batch_sizes=[1, 16], strategy=strategy)
        assert report.graphs[0].candidates[0].status == "selected", report.graphs[0].candidates[0].reason
        for batch in (1, 2, 15, 16):
            x = torch.randn(batch, 3, 8, 8)
            with torch.no_grad():
                torch.testing.assert_close(module(x), model(x))
    finally:
        ait.config.reset()
        del module


def test_checkpoint_round_trip_in_a_fresh_process_without_compiling(tmp_path: Path) -> None:
    """ait.save, then ait.load into a model with other weights in a new process: same outputs,
    no export and no compile, and with release_weights the original weights are gone."""
    import aitune_core as ait

    def make() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()

    torch.manual_seed(0)
    model = make()
    module = ait.Module(model, "aot-checkpoint")
    ait.config.cache_dir = tmp_path / "cache"
    try:
        strategy = ait.FirstWinsStrategy([TorchInductorAotBackend()]).enable_performance_validation(False)
        ait.tune(module, [torch.randn(6) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
        path = ait.save(module, tmp_path / "ckpt")
        x = torch.randn(3, 6)
        torch.save({"x": x, "y": module(x)}, tmp_path / "expected.pt")
    finally:
        ait.config.reset()
        del module
    script = f"""
        import torch, torch.export, torch._inductor
        def refuse(*args, **kwargs):
            raise AssertionError("loading a checkpoint must not export or compile")
        torch.export.export = torch._inductor.aoti_compile_and_package = refuse
        import aitune_core as ait
        torch.manual_seed(123)
        model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()
        loaded = ait.load(model, {str(path)!r}, release_weights=True, trust_native_code=True)
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        assert all(p.is_meta for p in loaded.module.parameters())
        assert torch.equal(loaded(expected["x"]), expected["y"])
        print("ok")
    """
    env = {**os.environ, "AITUNE_CACHE_DIR": str(tmp_path / "cache2"), "AITUNE_LOG_LEVEL": "error"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
