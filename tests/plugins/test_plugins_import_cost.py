"""``import aitune_core`` must not discover or load plugins: that waits for first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import aitune_core

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
