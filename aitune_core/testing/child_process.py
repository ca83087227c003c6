"""A fresh Python process that imports the same aitune as the tests, for what only a new process shows.

What importing a plugin loads, or whether a checkpoint restores without the objects
that built it, can only be seen in a process that has imported nothing yet. The child
imports aitune_core and the named packages from where this process does (a source
checkout or an install), and none of the caller's ``AITUNE_*`` settings reach it, so
that it loads plugins and reads its config as a user's fresh process would.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path


def env_with_sources(*packages: str) -> dict[str, str]:
    """The environment for a child process that imports aitune_core and ``packages`` from where this one does."""
    modules = [importlib.import_module(name) for name in ("aitune_core", *packages)]
    paths = {str(Path(str(module.__file__)).parents[1]) for module in modules}
    environ = {key: value for key, value in os.environ.items() if not key.startswith("AITUNE_")}
    return {**environ, "PYTHONPATH": os.pathsep.join([*sorted(paths), os.environ.get("PYTHONPATH", "")])}


def run_python(code: str, *packages: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child process (see :func:`env_with_sources`); its output is captured as text."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with_sources(*packages), timeout=timeout
    )
