"""``import aitune_core`` must not discover or load plugins: that waits for first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aitune_core

pytestmark = pytest.mark.together  # interpreters that see every installed distribution

FAKE_DISTS = Path(__file__).parent / "fake_dists"
ROOT = Path(aitune_core.__file__).resolve().parents[1]

# Modules that only plugin discovery and loading import. -X importtime lists modules
# imported by import statements; plugins themselves are imported with importlib and
# are checked in sys.modules by the probe below.
LOADING_MODULES = {
    "pluggy",
    "aitune_core.plugins.loader",
    "aitune_core.plugins.registry",
    "aitune_core.plugins.hookspecs",
}
PLUGIN_MODULES = ["aitune_core.plugins.builtin", "aitune_fake_good"]


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(FAKE_DISTS / "good"), str(ROOT)])
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=environ, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def imported_modules(importtime_output: str) -> set[str]:
    names = set()
    for line in importtime_output.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_import_loads_no_plugin_machinery() -> None:
    imported = imported_modules(run_python("-X", "importtime", "-c", "import aitune_core").stderr)
    assert "aitune_core" in imported, "the importtime output was not parsed"
    assert not imported & LOADING_MODULES


def test_first_use_loads_what_import_did_not() -> None:
    """The same check the other way round, so the test above cannot pass vacuously."""
    code = "import aitune_core; aitune_core.plugins()"
    imported = imported_modules(run_python("-X", "importtime", "-c", code).stderr)
    assert imported >= LOADING_MODULES


def test_import_scans_no_entry_points_and_imports_no_plugin() -> None:
    probe = textwrap.dedent(
        """
        import importlib.metadata as metadata
        import json
        import sys

        import torch  # torch scans its own entry-point group when imported

        calls = []
        real_distributions, real_entry_points = metadata.distributions, metadata.entry_points

        def distributions(**kwargs):
            calls.append("distributions")
            return real_distributions(**kwargs)

        def entry_points(**kwargs):
            calls.append("entry_points:" + str(kwargs.get("group")))
            return real_entry_points(**kwargs)

        metadata.distributions, metadata.entry_points = distributions, entry_points
        import aitune_core
        import aitune_core.plugins

        def state():
            return {"calls": list(calls), "modules": [m for m in PLUGIN_MODULES if m in sys.modules]}

        at_import = state()
        names = [record.name for record in aitune_core.plugins()]
        print(json.dumps({"at_import": at_import, "at_use": state(), "plugins": names}))
        """
    ).replace("PLUGIN_MODULES", repr(PLUGIN_MODULES))
    report = json.loads(run_python("-c", probe).stdout)
    assert report["at_import"] == {"calls": [], "modules": []}
    assert report["at_use"] == {"calls": ["distributions"], "modules": PLUGIN_MODULES}
    assert report["plugins"][0] == "builtin" and "good" in report["plugins"]


_BUILD_BY_HAND = """
import importlib.metadata as metadata
import json
import sys
import tempfile
from pathlib import Path

import torch

calls = []
real_distributions, real_entry_points = metadata.distributions, metadata.entry_points


def distributions(**kwargs):
    calls.append("distributions")
    return real_distributions(**kwargs)


def entry_points(**kwargs):
    calls.append("entry_points:" + str(kwargs.get("group")))
    return real_entry_points(**kwargs)


metadata.distributions, metadata.entry_points = distributions, entry_points

from aitune_core.backends import BuildContext, TorchEagerBackend
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.recorder import GraphRecorder
from aitune_core.serialization import converter

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
signature = ForwardSignature(model.forward)
recorder = GraphRecorder("by-hand", signature)  # what Module records with, minus the plugins' key parts
for batch in (1, 3):
    with global_context:
        global_context.set(BATCH_SIZE_KEY, batch)
        recorder.record(model, (torch.randn(batch, 4),), {})
(graph,) = recorder.graphs.values()
context = BuildContext(
    module=model,
    module_name="by-hand",
    graph_spec=graph.spec,
    samples=graph.samples,
    device=torch.device("cpu"),
    cache_dir=Path(tempfile.mkdtemp()),
    signature=signature,
)
backend = TorchEagerBackend().build(context)
x = torch.randn(2, 4)
torch.testing.assert_close(backend(x), model(x))
backend.deactivate()
stored = converter().unstructure(backend.config)


def state():
    loaded = [name for name in ("pluggy", "aitune_core.plugins.registry", "aitune_fake_good") if name in sys.modules]
    return {"calls": list(calls), "modules": loaded}


by_hand = {**state(), "state": backend.state.name, "stored": stored}
import aitune_core

aitune_core.Module(torch.nn.Linear(4, 4), "wrapped")  # an entry point: this one loads the plugins
print(json.dumps({"by_hand": by_hand, "after_module": state()}))
"""


def test_a_backend_built_by_hand_loads_no_plugin() -> None:
    """Building, running and storing a backend reads no entry point; wrapping a module does."""
    report = json.loads(run_python("-c", _BUILD_BY_HAND).stdout)
    stored = {"autocast_enabled": False, "autocast_dtype": "torch.float16"}
    assert report["by_hand"] == {"calls": [], "modules": [], "state": "INACTIVE", "stored": stored}
    assert report["after_module"]["calls"] == ["distributions"]
    assert report["after_module"]["modules"] == ["pluggy", "aitune_core.plugins.registry", "aitune_fake_good"]
