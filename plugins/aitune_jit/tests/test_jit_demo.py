"""``AITUNE_JIT=1`` on an unmodified script serving the demo CNN, nothing else set: tuned in the
background, stored, and loaded by the next run. With its defaults the JIT builds in a child process
(AOT Inductor, and ONNX Runtime where installed; :mod:`aitune_jit.placement`). It needs
aitune-inductor, and runs where both are installed (the all-together session).

Whether the compiled graph beats eager is the machine's verdict (the performance gate),
so the test asserts what does not depend on the clock: the module ends tuned, every
output matched eager, and the second run is routed from its first call without tuning.
The latency during tuning is measured by ``python -m bench jit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "aitune_inductor", reason="the demo builds AOT Inductor: it runs where aitune-inductor is installed"
)

from jit_helpers import installed_startup_hook

from aitune_core.testing.child_process import env_with_sources

pytestmark = pytest.mark.together  # it needs aitune-inductor beside aitune-jit: tests_all is where it runs

SCRIPT = """
import copy, sys
import torch
from aitune_core.demo.models import DemoCNN  # the model's code only: the script never calls aitune

torch.manual_seed(0)
torch.set_num_threads(1)
model = DemoCNN().eval()
twin = copy.deepcopy(model)
images = torch.randn(8, 3, 32, 32)
worst = 0.0
with torch.no_grad():
    for call in range(500):
        out = model(images)
        worst = max(worst, float((out - twin(images)).abs().max()))
print("worst error", worst)
"""


def _run(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    installed_startup_hook()
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    environ = {
        **env_with_sources("aitune_inductor"),
        "AITUNE_JIT": "1",
        "AITUNE_CACHE_DIR": str(tmp_path / "cache"),
        "AITUNE_LOG_FORMAT": "json",
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor")),
    }
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environ, timeout=900)
    said = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # tracebacks, not the log
    assert done.returncode == 0, "\n".join(said[-60:])
    return done.stdout, [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]


def _final(events: list[dict[str, Any]]) -> str:
    (final,) = [event["state"] for event in events if event.get("event") == "jit: at exit"]
    return str(final)


def test_the_demo_cnn_is_tuned_without_a_code_change_and_loaded_next_run(tmp_path: Path) -> None:
    out, events = _run(tmp_path)
    assert float(out.split("worst error")[1]) < 1e-4  # every call matched eager
    assert _final(events).startswith("DemoCNN: tuned"), _final(events)
    failed_builds = [event.get("reason") for event in events if event.get("event") == "build failed"]
    assert not failed_builds

    out, again = _run(tmp_path)
    assert float(out.split("worst error")[1]) < 1e-4
    assert [e for e in again if e.get("event") == "jit: routed from a stored result"]
    assert not [e for e in again if e.get("event") == "jit: tuning in the background"]
    assert _final(again).endswith(": loaded")
