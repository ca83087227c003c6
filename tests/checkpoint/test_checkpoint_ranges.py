"""Checkpoints of graphs served by several backends over batch ranges.

Eager serves batch 1, ``WeightFileBackend`` batches 2-4 and ``RangeFileBackend`` (a
second persistable backend, written here as a fake distribution) batches 5-16, as a
scripted timer measured them. The checkpoint must store each backend with its own
files, show the ranges, and load into a fresh model that routes every batch as the
tuned one did.
"""

from __future__ import annotations

import gc
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from weight_file_backend import WeightFileBackend

import aitune_core as ait
from aitune_core.checkpoint.inspect import describe_checkpoint
from aitune_core.checkpoint.manifest import FORMAT_VERSION, migrate
from aitune_core.errors import CheckpointError
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.profiling import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

FAST = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.05, max_batch_search=False)
SIZES = [1, 2, 4, 8, 16]

RANGE_FILE_SOURCE = """
import copy
from pathlib import Path

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig

AITUNE_PLUGIN_API = 1


@attrs.frozen
class RangeFileConfig(BackendConfig):
    pass


class RangeFileBackend(Backend):
    \"\"\"Serves from the weights its build wrote to a file, like an engine from its plan.\"\"\"

    name = "test_range_file"
    config_class = RangeFileConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.weights = None
        self._module = None

    def _build(self, context):
        self.weights = context.cache_dir / "range_weights.pt"
        torch.save(context.module.state_dict(), self.weights)
        self._activate()

    def _activate(self):
        module = copy.deepcopy(self.context.module)
        module.load_state_dict(torch.load(self.weights, weights_only=True))
        self._module = module

    def _deactivate(self):
        self._module = None

    def _infer(self, *args, **kwargs):
        return self._module(*args, **kwargs)

    def _artifacts(self):
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts, extra):
        self.weights = Path(artifacts["weights"])


@hookimpl
def aitune_register_backends():
    return [RangeFileBackend]
"""

MS = 1e-3
LATENCIES = {
    EAGER: {1: 1 * MS, 2: 2 * MS, 4: 4 * MS, 8: 8 * MS, 16: 16 * MS},
    "WeightFileBackend()": {1: 1.5 * MS, 2: 1 * MS, 4: 2 * MS, 8: 6 * MS, 16: 12 * MS},
    "RangeFileBackend()": {1: 3 * MS, 2: 3 * MS, 4: 3.5 * MS, 8: 3 * MS, 16: 5 * MS},
}
"""Eager is fastest at batch 1, WeightFileBackend at 2 and 4, RangeFileBackend at 8 and 16."""


@pytest.fixture
def range_file(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> type:
    """Both test backends installed as plugins, so that checkpoints naming them save and load."""
    aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-test-weight-file", entry_points={"weight_file": "weight_file_backend"}),
        aitune_fake_dist("aitune-test-range-file", source=RANGE_FILE_SOURCE),
    )
    import aitune_test_range_file

    return aitune_test_range_file.RangeFileBackend


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def by_size(table: dict[int, float]) -> Callable[[int], float]:
    return lambda batch: table[batch]


def timer() -> ScriptedTimer:
    return ScriptedTimer({name: by_size(table) for name, table in LATENCIES.items()})


def tuned(name: str, range_file: type) -> ait.Module:
    module = ait.Module(model(), name)
    strategy = ait.MaxThroughputStrategy([WeightFileBackend(), range_file()], profile=FAST, timer=timer())
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=SIZES, strategy=strategy)
    return module


def served(route: Route) -> list[tuple[int, int, str]]:
    return [(low, high, "eager" if b is None else type(b).__name__) for low, high, b in route.ranges(1, 16)]


def spy(route: Route) -> list[tuple[str, int]]:
    """Notes which backend each routed call reaches, and its batch; eager calls are not noted."""
    log: list[tuple[str, int]] = []

    def counted(call: Any) -> Any:
        if call is RUN_EAGERLY:
            return call
        owner = type(call.__self__).__name__

        def run(x: torch.Tensor) -> Any:
            log.append((owner, x.shape[0]))
            return call(x)

        return run

    route.call = counted(route.call)
    route.lower_calls = tuple((up_to, counted(call)) for up_to, call in route.lower_calls)
    return log


EXPECTED_RANGES = [(1, 1, "eager"), (2, 4, "WeightFileBackend"), (5, 16, "RangeFileBackend")]
EXPECTED_CALLS = [("WeightFileBackend", 2), ("WeightFileBackend", 4), ("RangeFileBackend", 5), ("RangeFileBackend", 16)]


def check_routing(module: ait.Module) -> None:
    (route,) = module.routes.values()
    assert served(route) == EXPECTED_RANGES
    log = spy(route)
    for batch in (1, 2, 4, 5, 16):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(module(x), module.module(x), rtol=0, atol=0)
    assert log == EXPECTED_CALLS


@pytest.fixture
def saved(tmp_path: Path, unique_name: Callable[[str], str], range_file: type) -> tuple[Path, str]:
    name = unique_name("ranges")
    module = tuned(name, range_file)
    check_routing(module)
    path = ait.save(module, tmp_path / "ckpt")
    del module
    gc.collect()  # the name is free again for the load
    return path, name


def manifest_of(path: Path) -> dict[str, Any]:
    return json.loads((path / "manifest.json").read_text())


def test_each_backend_of_a_graph_is_stored_with_its_range(saved: tuple[Path, str]) -> None:
    path, _ = saved
    manifest = manifest_of(path)
    (graph,) = manifest["modules"][0]["graphs"]
    assert graph["backend"]["name"] == "test_range_file"
    assert graph["backend"]["distribution"] == "aitune-test-range-file"
    eager_range, weight_range = graph["lower"]
    assert eager_range == {"up_to": 1, "backend": None}
    assert weight_range["up_to"] == 4
    assert weight_range["backend"]["name"] == "test_weight_file"
    assert weight_range["backend"]["distribution"] == "aitune-test-weight-file"
    folder = "modules/0/graphs/0"
    lower_file = weight_range["backend"]["artifacts"]["weights"]["path"]
    main_file = graph["backend"]["artifacts"]["weights"]["path"]
    assert lower_file.startswith(f"{folder}/ranges/1/") and not main_file.startswith(f"{folder}/ranges/")
    assert (path / lower_file).is_file() and (path / main_file).is_file()
    assert {p["distribution"] for p in manifest["plugins"]} >= {"aitune-test-weight-file", "aitune-test-range-file"}


def test_inspect_shows_what_serves_each_range(saved: tuple[Path, str]) -> None:
    path, _ = saved
    text = describe_checkpoint(path)
    assert "Serves" in text
    lines = text.splitlines()

    def row(serves: str) -> str:
        (found,) = [line for line in lines if f" {serves} " in line]
        return found

    assert "eager" in row("batch 1")
    assert "WeightFileBackend()" in row("batch 2-4") and "aitune-test-weight-file" in row("batch 2-4")
    assert "RangeFileBackend()" in row("batch 5+") and "aitune-test-range-file" in row("batch 5+")


def test_a_fresh_model_loads_the_ranges_and_routes_each_batch(saved: tuple[Path, str]) -> None:
    path, name = saved
    fresh = model()
    restored = ait.load(fresh, path)
    assert isinstance(restored, ait.Module) and restored.name == name and restored.module is fresh
    (route,) = restored.routes.values()
    assert len(route.backends) == 2 and all(b.state.name == "DEPLOYED" for b in route.backends)
    check_routing(restored)


def test_a_version_2_eager_range_migrates_to_the_lowest_range() -> None:
    graph: dict[str, Any] = {"spec": {}, "backend": {}, "eager_up_to": 4}
    none: dict[str, Any] = {"spec": {}, "backend": {}, "eager_up_to": None}
    data = migrate({"format_version": 2, "modules": [{"graphs": [graph, none]}]})
    assert data["format_version"] == FORMAT_VERSION
    migrated, plain = data["modules"][0]["graphs"]
    assert migrated["lower"] == [{"up_to": 4, "backend": None}] and "eager_up_to" not in migrated
    assert plain["lower"] == [] and "eager_up_to" not in plain


def test_a_version_2_checkpoint_loads_with_eager_below_its_backend(
    tmp_path: Path, unique_name: Callable[[str], str], range_file: type
) -> None:
    name = unique_name("v2")
    module = ait.Module(model(), name)
    strategy = ait.FirstWinsStrategy([range_file()], profile=FAST)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=SIZES, strategy=strategy)
    path = ait.save(module, tmp_path / "v2")
    del module
    gc.collect()
    manifest = manifest_of(path)
    manifest["format_version"] = 2
    for graph in manifest["modules"][0]["graphs"]:
        assert graph.pop("lower") == []
        graph["eager_up_to"] = 4
    (path / "manifest.json").write_text(json.dumps(manifest))
    restored = ait.load(model(), path)
    assert isinstance(restored, ait.Module)
    (route,) = restored.routes.values()
    assert route.eager_up_to == 4
    assert served(route) == [(1, 4, "eager"), (5, 16, "RangeFileBackend")]


@pytest.mark.parametrize("order", [[4, 1], [4, 4], [0, 4]])
def test_ranges_out_of_order_are_refused(saved: tuple[Path, str], tmp_path: Path, order: list[int]) -> None:
    path, _ = saved
    edited = tmp_path / "edited"
    shutil.copytree(path, edited)
    manifest = manifest_of(edited)
    graph = manifest["modules"][0]["graphs"][0]
    for stored, up_to in zip(graph["lower"], order, strict=True):
        stored["up_to"] = up_to
    (edited / "manifest.json").write_text(json.dumps(manifest))
    fresh = model()
    with pytest.raises(CheckpointError, match="batch ranges are not ascending"):
        ait.load(fresh, edited)
    assert not isinstance(fresh, ait.Module) and not any(isinstance(m, ait.Module) for m in fresh.modules())
