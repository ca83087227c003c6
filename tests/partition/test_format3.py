"""Checkpoints written by format version 3 (a partition stored beside eager's entry) still load.

``format3/`` holds checkpoints written by the code of that version (see
``make_format3.py``): a flat partition, a nested one, and one whose child backends
carry a file that counts as native code. Each loads with the outputs it gave when
saved, keeps every load check, and saves again in the current format.
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
from partition_helpers import NestedMaskedBlock, ThreeBlocks

import aitune_core as ait
from aitune_core.checkpoint.inspect import describe_checkpoint
from aitune_core.checkpoint.manifest import FORMAT_VERSION
from aitune_core.errors import CheckpointError
from aitune_core.partition.backend import PartitionBackend

STORED = Path(__file__).parent / "format3"
TREES = {
    "flat": [
        ("block1", "TracedBackend()"),
        ("block2", "eager (declined: data-dependent output shape: aten.nonzero)"),
        ("block3", "TracedBackend()"),
    ],
    "nested": [("block1", "TracedBackend()"), ("block2", "partitioned"), ("block3", "TracedBackend()")],
    "engine": [
        ("block1", "EngineFileBackend()"),
        ("block2", "eager (declined: data-dependent output shape: aten.nonzero)"),
        ("block3", "EngineFileBackend()"),
    ],
}


def model_for(folder: str) -> torch.nn.Module:
    return (ThreeBlocks(NestedMaskedBlock) if folder == "nested" else ThreeBlocks()).eval()


def copy_of(folder: str, tmp_path: Path) -> Path:
    target = tmp_path / folder
    shutil.copytree(STORED / folder / "checkpoint", target)
    return target


def expected(folder: str) -> dict[str, torch.Tensor]:
    return torch.load(STORED / folder / "expected.pt", weights_only=True)


def tree(module: ait.Module) -> list[tuple[str, str]]:
    (route,) = module.routes.values()
    assert isinstance(route.backend, PartitionBackend)
    return [(node.path, node.serves) for node in route.backend.tree()]


def load(folder: str, path: Path) -> ait.Module:
    loaded = ait.load(model_for(folder), path, trust_native_code=folder == "engine")
    assert isinstance(loaded, ait.Module)
    return loaded


@pytest.mark.parametrize("folder", list(TREES))
def test_a_format3_checkpoint_loads_with_the_same_outputs(folder: str, traced: Path, tmp_path: Path) -> None:
    assert json.loads((STORED / folder / "checkpoint" / "manifest.json").read_text())["format_version"] == 3
    loaded = load(folder, copy_of(folder, tmp_path))
    assert tree(loaded) == TREES[folder]
    stored = expected(folder)
    with torch.no_grad():
        assert torch.equal(loaded(stored["x"]), stored["y"])


def test_its_native_code_is_still_refused_untrusted(traced: Path, tmp_path: Path) -> None:
    fresh = ThreeBlocks().eval()
    with pytest.raises(CheckpointError, match=r"holds native code.*engine\.pt\).*engine\.pt\)"):
        ait.load(fresh, copy_of("engine", tmp_path))
    assert not any(isinstance(m, ait.Module) for m in fresh.modules())


@pytest.mark.parametrize("folder", ["nested", "engine"])
def test_it_saves_again_in_the_current_format(folder: str, traced: Path, tmp_path: Path) -> None:
    loaded = load(folder, copy_of(folder, tmp_path))
    again = ait.save(loaded, tmp_path / "again")
    del loaded
    gc.collect()
    assert json.loads((again / "manifest.json").read_text())["format_version"] == FORMAT_VERSION
    reloaded = load(folder, again)
    assert tree(reloaded) == TREES[folder]
    stored = expected(folder)
    with torch.no_grad():
        assert torch.equal(reloaded(stored["x"]), stored["y"])


def test_inspect_draws_its_tree(tmp_path: Path) -> None:
    text = describe_checkpoint(copy_of("flat", tmp_path))
    lines = text.splitlines()
    start = lines.index("Graph 0 is partitioned; its submodules run on:")
    for line, (path, serves) in zip(lines[start + 1 : start + 4], TREES["flat"], strict=True):
        assert line.split("  ")[0].endswith(path) and serves in line


def _part(index: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda graph: graph["partition"]["parts"][index].update(values)


BAD_ENTRIES = {
    "no such submodule": (_part(0, path="nope"), "names `nope`, which is not a submodule"),
    "an attribute, not a submodule": (_part(0, path="training"), "not a submodule"),
    "an empty path": (_part(0, path=""), "not a submodule"),
    "a path through a leaf": (_part(2, path="block3.weight"), "not a submodule"),
    "overlapping parts": (_part(2, path="block1.linear"), "overlap"),
    "a repeated part": (_part(2, path="block1"), "overlap"),
    "other parameters": (_part(0, parameters=1), "tuned with 1 parameters"),
    "a share that is no fraction": (_part(0, share=2.5), "not a fraction"),
    "a compiled backend for the whole": (
        lambda graph: graph.update(backend=graph["partition"]["parts"][0]["graphs"][0]["backend"]),
        "must store eager as its backend",
    ),
    "a part graph of another forward": (
        lambda graph: graph["partition"]["parts"][2]["graphs"].append(graph["partition"]["parts"][0]["graphs"][0]),
        "not a parameter of this module's forward",
    ),
    "a wrong type": (_part(0, parameters="144"), "parameters"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_a_bad_format3_entry_is_refused_before_anything_changes(traced: Path, tmp_path: Path, case: str) -> None:
    change, message = BAD_ENTRIES[case]
    edited = copy_of("flat", tmp_path)
    manifest = json.loads((edited / "manifest.json").read_text())
    change(manifest["modules"][0]["graphs"][0])
    (edited / "manifest.json").write_text(json.dumps(manifest))
    fresh = ThreeBlocks().eval()
    with pytest.raises(CheckpointError, match=message):
        ait.load(fresh, edited)
    assert not any(isinstance(m, ait.Module) for m in fresh.modules())
    gc.collect()
    assert isinstance(load("flat", copy_of("flat", tmp_path / "again")), ait.Module)


def _damage(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(graph: dict[str, Any]) -> None:
        target: Any = graph["partition"]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return change


DAMAGED = {
    "parts that are no list": _damage(["parts"], "block1"),
    "a part that is no object": _damage(["parts", 0], 3),
    "graphs that are no list": _damage(["parts", 0, "graphs"], {"0": {}}),
    "a graph that is no object": _damage(["parts", 0, "graphs", 0], "graph"),
    "a child backend that is no object": _damage(["parts", 0, "graphs", 0, "backend"], None),
    "child artifacts that are no object": _damage(["parts", 0, "graphs", 0, "backend", "artifacts"], ["engine"]),
    "ranges that are no list": _damage(["parts", 0, "graphs", 0, "lower"], 4),
    "samples that are no reference": _damage(["parts", 0, "graphs", 0, "samples"], "samples.pt"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_format3_partition_is_a_checkpoint_error(traced: Path, tmp_path: Path, case: str) -> None:
    """Migrating untrusted data never fails with another error: what it cannot read, the schema refuses."""
    edited = copy_of("engine", tmp_path)
    manifest = json.loads((edited / "manifest.json").read_text())
    DAMAGED[case](manifest["modules"][0]["graphs"][0])
    (edited / "manifest.json").write_text(json.dumps(manifest))
    fresh = ThreeBlocks().eval()
    with pytest.raises(CheckpointError):
        ait.load(fresh, edited, trust_native_code=True)
    assert not any(isinstance(m, ait.Module) for m in fresh.modules())
