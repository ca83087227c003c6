"""Run a script as a deployment would: a new process whose Inductor cache is a new, empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_fresh(script: str, arguments: list[str], inductor_cache: Path, **env: str) -> tuple[str, str]:
    """Run ``script`` with ``arguments``; the last line it prints, and its log (stderr)."""
    inductor_cache.mkdir()
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), **env}
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=600, env=environment
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1], done.stderr
