"""``AITUNE_JIT=1`` on a script that never imports aitune, in fresh processes: tuned, stored, loaded again.

The interpreter-start line is the ``aitune_jit.pth`` that installing aitune-jit puts in
site-packages, by ``pip install`` and ``pip install -e`` alike: the script runs as
``python serve.py``, as a user runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jit_helpers import installed_startup_hook

from aitune_core.testing.child_process import env_with_sources

SCRIPT = """
import os, sys
print("torch imported before the script:", "torch" in sys.modules)
print("AITUNE_JIT left in the environment:", os.environ.get("AITUNE_JIT"))
import copy
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))

torch.manual_seed(0)
model = Model().eval()
twin = copy.deepcopy(model)
x = torch.randn(4, 16)
with torch.no_grad():
    for call in range(12):
        out = model(x)  # the first top-level module call: the model the JIT takes
        assert torch.allclose(out, twin(x))
print("aitune imported by the script:", any(name == "aitune_jit.api" for name in sys.modules))
"""


def _run(tmp_path: Path, **env: str) -> tuple[str, list[dict[str, Any]]]:
    installed_startup_hook()
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    environ = {
        **env_with_sources(),
        "AITUNE_CACHE_DIR": str(tmp_path / "cache"),
        "AITUNE_LOG_FORMAT": "json",
        "AITUNE_JIT_CALLS": "4",
        "AITUNE_JIT_BACKENDS": "eager",
        **env,
    }
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return done.stdout, events


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("event") == name]


@pytest.mark.slow
def test_an_unmodified_script_is_tuned_stored_and_routed_from_its_first_call_next_time(tmp_path: Path) -> None:
    out, events = _run(tmp_path, AITUNE_JIT="1")
    assert "torch imported before the script: False" in out  # nothing heavy at interpreter start
    assert "AITUNE_JIT left in the environment: None" in out  # children do not tune models of their own
    assert "aitune imported by the script: True" in out  # by the JIT, once torch was imported
    assert _named(events, "jit: model found")[0]["modules"] == ["Model"]
    (final,) = _named(events, "jit: at exit")
    assert final["state"].startswith("Model: tuned"), final
    assert list((tmp_path / "cache" / "jit").iterdir())

    _, again = _run(tmp_path, AITUNE_JIT="1")
    assert _named(again, "jit: routed from a stored result")
    assert not _named(again, "jit: tuning in the background")
    (final,) = _named(again, "jit: at exit")
    assert final["state"].startswith("Model: tuned") and final["state"].endswith(": loaded"), final


def test_without_aitune_jit_the_startup_line_does_nothing(tmp_path: Path) -> None:
    out, events = _run(tmp_path, AITUNE_JIT="0")
    assert "aitune imported by the script: False" in out
    assert events == []


def test_the_startup_line_never_stops_the_interpreter() -> None:
    pth = installed_startup_hook().read_text()
    environ = {**env_with_sources(), "AITUNE_JIT": "1", "PYTHONPATH": ""}
    # aitune_jit cannot be found: one line on stderr, and the program runs.
    code = f"import importlib.util as u; u.find_spec = lambda name: None\n{pth}\nprint('still running')"
    # -S: an installed copy of the line (a non-editable install) must not run first and take AITUNE_JIT.
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=environ, timeout=60)
    assert done.returncode == 0 and "still running" in done.stdout
    assert "AITUNE_JIT ignored" in done.stderr
