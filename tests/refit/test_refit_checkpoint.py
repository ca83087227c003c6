"""A checkpoint saved after a refit holds the new weights, in the module's file and the backend's, and loads."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from refit_backends import CopyBackend
from refit_helpers import WIDTH, mlp, new_weights, run, tune_with

import aitune_core as ait

Name = Callable[[str], str]


def test_a_checkpoint_saved_after_a_refit_holds_the_new_weights_and_loads(
    unique_name: Name, tmp_path: Path, aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any
) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-refit", entry_points={"refit": "refit_backends"}))
    name = unique_name("model")
    model = mlp()
    wrapped = ait.Module(model, name)
    tune_with(wrapped, CopyBackend())
    weights = new_weights(model)
    model.load_state_dict(weights)
    assert ait.refit(wrapped).ok
    path = ait.save(wrapped, tmp_path / "ckpt")
    del wrapped, model
    gc.collect()  # the name is free again for the load

    manifest = json.loads((path / "manifest.json").read_text())
    (graph,) = manifest["modules"][0]["graphs"]
    stored = torch.load(path / graph["backend"]["artifacts"]["weights"]["path"], weights_only=True)
    assert all(torch.equal(stored[key], value) for key, value in weights.items()), "the backend's file is the new one"

    loaded = ait.load(ait.Module(mlp(), name), path)
    assert isinstance(loaded, ait.Module)
    (route,) = loaded.routes.values()
    backend = route.backend
    assert isinstance(backend, CopyBackend) and backend.state is ait.BackendState.DEPLOYED
    assert all(torch.equal(loaded.module.state_dict()[key], value) for key, value in weights.items())
    x = torch.randn(3, WIDTH)
    reference = mlp()
    reference.load_state_dict(weights)
    torch.testing.assert_close(run(loaded, x), run(reference, x))
    assert backend.calls == 1, "the loaded backend serves the new weights itself"
