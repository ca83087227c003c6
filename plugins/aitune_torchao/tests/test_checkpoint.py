"""``aitune_core.save`` and ``load`` with a quantized backend, loaded in a fresh process.

The loading process builds the model with other random weights and forbids torchao's
``quantize_``: the quantized weights must come from the checkpoint's artifact, equal
to the saved ones, and give exactly the tuned model's outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch

import aitune_core as ait
from aitune_core.testing.child_process import env_with_sources
from aitune_core.testing.models import SmallMLP
from aitune_torchao import TorchAOBackend
from aitune_torchao.serialization import is_quantized

LOADER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import torch
    import torchao.quantization

    import aitune_core as ait
    from aitune_torchao.serialization import is_quantized

    def refuse(*args, **kwargs):
        raise AssertionError("loading a checkpoint must not quantize again")

    torchao.quantization.quantize_ = refuse

    folder = Path(sys.argv[1])
    torch.manual_seed(999)  # other initial weights than the tuned model's


    class SmallMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(32, 64)
            self.act = torch.nn.GELU()
            self.down = torch.nn.Linear(64, 32)

        def forward(self, x):
            return self.down(self.act(self.up(x)))


    model = torch.nn.Sequential(SmallMLP(), torch.nn.ReLU()).eval()
    ait.load(model, folder / "ckpt")
    (route,) = model[0]._routes.values()
    backend = route.backend
    saved = torch.load(folder / "quantized.pt", weights_only=True)
    loaded = {k: v for k, v in backend._module.state_dict().items() if is_quantized(v)}
    assert sorted(loaded) == sorted(saved), (sorted(loaded), sorted(saved))
    for name, tensor in saved.items():
        assert type(loaded[name]) is type(tensor), name
        assert torch.equal(loaded[name].qdata, tensor.qdata) and torch.equal(loaded[name].scale, tensor.scale), name
    x = torch.load(folder / "inputs.pt", weights_only=True)
    with torch.no_grad():
        out = model(x)
    expected = torch.load(folder / "outputs.pt", weights_only=True)
    print(json.dumps({
        "backend": backend.describe(),
        "state": backend.state.name,
        "equal": bool(torch.equal(out, expected)),
        "max_diff": float((out - expected).abs().max()),
    }))
    """
)


def test_a_fresh_process_loads_the_quantized_weights_not_the_original_ones(
    tmp_path: Path, aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    dist = aitune_fake_dist("aitune-torchao", entry_points={"torchao": "aitune_torchao.plugin"})
    aitune_isolated_plugins.load(dist)
    torch.manual_seed(0)
    model = torch.nn.Sequential(SmallMLP(), torch.nn.ReLU()).eval()
    model[0] = ait.Module(model[0], "mlp")
    strategy = ait.OneBackendStrategy(TorchAOBackend(preset="int8wo"))
    strategy.enable_performance_validation(False)
    ait.tune(model, [torch.randn(32) for _ in range(8)], batch_sizes=[2, 4], strategy=strategy)
    (route,) = model[0]._routes.values()  # type: ignore[operator]
    assert isinstance(route.backend, TorchAOBackend)

    x = torch.randn(3, 32)
    with torch.no_grad():
        torch.save(model(x), tmp_path / "outputs.pt")
    torch.save(x, tmp_path / "inputs.pt")
    quantized = {k: v for k, v in route.backend._module.state_dict().items() if is_quantized(v)}
    torch.save(quantized, tmp_path / "quantized.pt")
    ait.save(model, tmp_path / "ckpt")

    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    (graph,) = manifest["modules"][0]["graphs"]
    assert graph["backend"]["name"] == "torchao" and graph["backend"]["is_jit"] is False
    assert graph["backend"]["distribution"] == "aitune-torchao"
    assert graph["backend"]["config"]["preset"] == "int8wo"
    assert list(graph["backend"]["artifacts"]) == ["weights"]

    environ = env_with_sources("aitune_torchao")
    environ["PYTHONPATH"] = os.pathsep.join([str(dist.path), environ["PYTHONPATH"]])
    environ["AITUNE_CACHE_DIR"] = str(tmp_path / "loader-cache")
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(tmp_path)], capture_output=True, text=True, env=environ, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == {"backend": "TorchAOBackend(preset='int8wo')", "state": "DEPLOYED", "equal": True, "max_diff": 0.0}
