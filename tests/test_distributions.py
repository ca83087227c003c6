"""Features that ship as distributions of their own: ``ait.jit`` names aitune-jit when it is missing,
and ``import aitune_core`` imports neither a feature distribution nor pytest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import aitune_core as ait
from aitune_core.testing.child_process import env_with_sources

pytestmark = pytest.mark.together  # what importing the core does where aitune-jit is installed


def test_ait_jit_names_the_distribution_to_install_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aitune_jit", None)  # what an environment without aitune-jit sees
    with pytest.raises(ait.MissingDistributionError, match=r"aitune-jit distribution.*pip install aitune-jit"):
        ait.jit.enable()
    assert not hasattr(ait, "jit")
    with pytest.raises(ImportError):
        from aitune_core import jit  # noqa: F401


def test_importing_the_core_imports_no_feature_distribution_nor_pytest() -> None:
    code = (
        "import json, sys, aitune_core\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'aitune_jit'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with_sources(), check=True
    )
    assert json.loads(done.stdout) == []
