"""Checkpoints keep a partition as any backend: its config and artifacts, checked as data before anything loads."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from partition_helpers import NestedMaskedBlock, ThreeBlocks, TracedBackend

import aitune_core as ait
from aitune_core.backends.restore import StoredStateError
from aitune_core.checkpoint.inspect import describe_checkpoint
from aitune_core.errors import CheckpointError
from aitune_core.partition.backend import PartitionBackend
from aitune_core.partition.state import MAX_DEPTH, check_depth
from aitune_core.testing.timing import FAST_PROFILE

ROOT = Path(__file__).resolve().parents[2]
TREE = [
    ("block1", "TracedBackend()"),
    ("block2", "eager (declined: data-dependent output shape: aten.nonzero)"),
    ("block3", "TracedBackend()"),
]


@attrs.define
class Saved:
    path: Path
    name: str
    x: torch.Tensor
    y: torch.Tensor


def tuned(name: str, middle: Any = None) -> ait.Module:
    model = (ThreeBlocks(middle) if middle is not None else ThreeBlocks()).eval()
    module = ait.Module(model, name)
    strategy = ait.FirstWinsStrategy([TracedBackend()], profile=FAST_PROFILE)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 2, 4], strategy=strategy, partition=True)
    return module


def tree_of(module: ait.Module) -> list[tuple[str, str]]:
    (route,) = module.routes.values()
    assert isinstance(route.backend, PartitionBackend)
    return [(node.path, node.serves) for node in route.backend.tree()]


@pytest.fixture
def saved(tmp_path: Path, unique_name: Callable[[str], str], traced: Path) -> Saved:
    name = unique_name("net")
    module = tuned(name)
    assert tree_of(module) == TREE
    path = ait.save(module, tmp_path / "ckpt")
    x = torch.randn(3, 8)
    with torch.no_grad():
        y = module(x)
    del module
    gc.collect()  # the name is free again for the load
    return Saved(path, name, x, y)


def manifest_of(path: Path) -> dict[str, Any]:
    return json.loads((path / "manifest.json").read_text())


def test_the_manifest_stores_the_partition_as_the_graphs_backend(saved: Saved) -> None:
    (graph,) = manifest_of(saved.path)["modules"][0]["graphs"]
    assert "partition" not in graph and graph["lower"] == []
    stored = graph["backend"]
    assert (stored["name"], stored["distribution"]) == ("partition", "aitune-core")
    parts = stored["config"]["parts"]
    assert [(p["path"], p["parameters"], len(p["graphs"])) for p in parts] == [
        ("block1", 144, 1),
        ("block2", 256, 0),
        ("block3", 68, 1),
    ]
    assert parts[1]["reason"] == "declined: data-dependent output shape: aten.nonzero"
    assert all(0 <= p["share"] <= 1 for p in parts)
    child = parts[0]["graphs"][0]
    assert (child["backend"]["name"], child["backend"]["distribution"]) == ("test_traced", "aitune-test-traced")
    # The children's samples are the partition's artifacts, copied and hashed as any backend's.
    assert (
        sorted(stored["artifacts"])
        == ["block1/0/samples", "block3/0/samples"]
        == sorted(g["samples"] for p in parts for g in p["graphs"])
    )
    assert (saved.path / stored["artifacts"][child["samples"]]["path"]).is_file()


def test_a_fresh_process_loads_the_same_partition(saved: Saved, traced: Path, tmp_path: Path) -> None:
    torch.save({"x": saved.x, "y": saved.y}, tmp_path / "expected.pt")
    code = f"""
        import torch, aitune_core as ait
        from partition_helpers import ThreeBlocks
        from aitune_core.partition.backend import PartitionBackend
        torch.manual_seed(123)  # other weights: the checkpoint's must replace them
        model = ait.load(ThreeBlocks().eval(), {str(saved.path)!r})
        (route,) = model.routes.values()
        partition = route.backend
        assert isinstance(partition, PartitionBackend) and partition.state.name == "DEPLOYED", partition
        assert [(n.path, n.serves) for n in partition.tree()] == {TREE!r}, partition.tree()
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        block1 = partition.parts[0].graphs[0].route.backend
        calls = block1.calls
        with torch.no_grad():
            assert torch.equal(model(expected["x"]), expected["y"])
        assert block1.calls == calls + 1 and block1.state.name == "DEPLOYED"
        print("ok")
    """
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")},
        "AITUNE_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(traced), str(Path(__file__).parent)]),
    }
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_a_loaded_partition_saves_and_loads_again(saved: Saved, tmp_path: Path) -> None:
    loaded = ait.load(ThreeBlocks().eval(), saved.path)
    assert isinstance(loaded, ait.Module) and tree_of(loaded) == TREE
    again = ait.save(loaded, tmp_path / "again")
    del loaded
    gc.collect()
    reloaded = ait.load(ThreeBlocks().eval(), again)
    assert isinstance(reloaded, ait.Module) and tree_of(reloaded) == TREE
    with torch.no_grad():
        assert torch.equal(reloaded(saved.x), saved.y)


def test_nested_partitions_round_trip(tmp_path: Path, unique_name: Callable[[str], str], traced: Path) -> None:
    name = unique_name("deep")
    module = tuned(name, NestedMaskedBlock)
    x = torch.randn(2, 8)
    with torch.no_grad():
        y = module(x)
    path = ait.save(module, tmp_path / "deep")
    del module
    gc.collect()
    loaded = ait.load(ThreeBlocks(NestedMaskedBlock).eval(), path)
    assert isinstance(loaded, ait.Module)
    (route,) = loaded.routes.values()
    (middle,) = [node for node in route.backend.tree() if node.path == "block2"]
    assert middle.serves == "partitioned" and [(n.path, n.serves) for n in middle.children] == [
        ("linear", "TracedBackend()")
    ]
    with torch.no_grad():
        assert torch.equal(loaded(x), y)


def test_inspect_draws_the_partition(saved: Saved) -> None:
    text = describe_checkpoint(saved.path)
    assert "Graph 0 is partitioned; its submodules run on:" in text
    lines = text.splitlines()
    start = lines.index("Graph 0 is partitioned; its submodules run on:")
    tree = lines[start + 1 : start + 4]
    for line, (path, serves) in zip(tree, TREE, strict=True):
        assert line.split("  ")[0].endswith(path) and serves in line and line.endswith("% of eager time")


def edit(path: Path, tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    edited = tmp_path / "edited"
    shutil.copytree(path, edited)
    manifest = manifest_of(edited)
    change(manifest["modules"][0]["graphs"][0])
    (edited / "manifest.json").write_text(json.dumps(manifest))
    return edited


def parts_of(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return graph["backend"]["config"]["parts"]  # type: ignore[no-any-return]


def _part(index: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda graph: parts_of(graph)[index].update(values)


def _child(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda graph: parts_of(graph)[0]["graphs"][0]["backend"].update(values)


BAD_ENTRIES = {
    "no such submodule": (_part(0, path="nope"), "names `nope`, which is not a submodule"),
    "an attribute, not a submodule": (_part(0, path="training"), "not a submodule"),
    "an empty path": (_part(0, path=""), "not a submodule"),
    "a path through a leaf": (_part(2, path="block3.weight"), "not a submodule"),
    "overlapping parts": (_part(2, path="block1.linear"), "overlap"),
    "a repeated part": (_part(2, path="block1"), "overlap"),
    "other parameters": (_part(0, parameters=1), "tuned with 1 parameters"),
    "a share that is no fraction": (_part(0, share=2.5), "not a fraction"),
    "samples it does not carry": (
        lambda graph: parts_of(graph)[0]["graphs"][0].update(samples="block2/0/samples"),
        "not one the partition carries",
    ),
    "a part graph of another forward": (
        lambda graph: parts_of(graph)[2]["graphs"].append(parts_of(graph)[0]["graphs"][0]),
        "not a parameter of this module's forward",
    ),
    "a wrong type": (_part(0, parameters="144"), r"parts\[0\]\.parameters"),
    "a child that sets unsafe options": (_child(config={"symbolic_sizes": False, "unsafe_options": True}), "unsafe"),
    "a child from another distribution": (_child(distribution="aitune-other"), "written by aitune-other"),
    "a child that is not installed": (_child(name="test_missing"), "`test_missing` is not installed"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_a_bad_partition_entry_is_refused_before_anything_changes(saved: Saved, tmp_path: Path, case: str) -> None:
    change, message = BAD_ENTRIES[case]
    fresh = ThreeBlocks().eval()
    with pytest.raises(CheckpointError, match=message):
        ait.load(fresh, edit(saved.path, tmp_path, change))
    assert not any(isinstance(m, ait.Module) for m in fresh.modules())
    # Nothing was left half-registered: the checkpoint as saved still loads.
    assert isinstance(ait.load(ThreeBlocks().eval(), saved.path), ait.Module)


def nested(graph: dict[str, Any], levels: int) -> None:
    """Put the graph's partition ``levels`` partitions deep, each level one part holding the next."""
    inner = graph["backend"]
    child = inner["config"]["parts"][0]["graphs"][0]
    for _ in range(levels):
        level_graph = {"spec": child["spec"], "backend": {**inner, "artifacts": {}}}
        part = {"path": "block1", "parameters": 144, "graphs": [level_graph]}
        inner = {**inner, "config": {"parts": [part]}}
    graph["backend"] = inner


def test_partitions_nest_only_so_deep(saved: Saved, tmp_path: Path) -> None:
    (graph,) = manifest_of(saved.path)["modules"][0]["graphs"]
    deep = {**graph, "backend": dict(graph["backend"])}
    nested(deep, MAX_DEPTH - 1)
    check_depth(deep["backend"]["config"])
    nested(deep, 1)
    with pytest.raises(StoredStateError, match=f"nests deeper than {MAX_DEPTH} levels"):
        check_depth(deep["backend"]["config"])
    fresh = ThreeBlocks().eval()
    with pytest.raises(CheckpointError, match=f"nests deeper than {MAX_DEPTH} levels"):
        ait.load(fresh, edit(saved.path, tmp_path, lambda g: nested(g, MAX_DEPTH)))
    assert not any(isinstance(m, ait.Module) for m in fresh.modules())
