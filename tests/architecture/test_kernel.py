"""What a backend author loads: the runtime import closure of the backend surface, measured.

The design measures the core by what a backend author has to load and read, not by
the size of the repository: every name of :mod:`aitune_core.plugin_api` plus the hook
specs (:mod:`aitune_core.plugins.hookspecs`), imported in a fresh interpreter, and the
lines of every ``aitune_core`` module that this put in ``sys.modules`` (package
``__init__``s included, as Python runs them). Executor names are measured apart: they
live in :mod:`aitune_core.plugin_api.executors`, which a backend author never imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aitune_core
import aitune_core.plugin_api

CLOSURE_BUDGET = 5_000
"""Lines of every core module the backend surface and the hook specs load (12,327 before the kernel was cut)."""
DEFINERS_BUDGET = 3_500
"""Lines of the modules that define the backend surface's names, and of the hook specs."""

ROOT = Path(aitune_core.__file__).resolve().parent

_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from aitune_core.plugin_api import {names}
    import aitune_core.plugin_api as api
    import aitune_core.plugins.hookspecs
    {extra}

    def lines(name):
        path = getattr(sys.modules[name], "__file__", None)
        return len(Path(path).read_text().splitlines()) if path else 0

    loaded = sorted(m for m in sys.modules if m == "aitune_core" or m.startswith("aitune_core."))
    def defined_in(value):
        return value.__module__ if isinstance(value, type) or callable(value) else type(value).__module__

    definers = {{"aitune_core.plugins.hookspecs"}} | {{defined_in(getattr(api, name)) for name in api.__all__}}
    print(json.dumps({{
        "loaded": {{m: lines(m) for m in loaded}},
        "definers": {{m: lines(m) for m in sorted(definers) if m.startswith("aitune_core")}},
        "third_party": sorted(m for m in ("pytest", "tabulate") if m in sys.modules),
    }}))
    """
)


def measure(*names: str, extra: str = "") -> dict[str, dict[str, int]]:
    """What ``from aitune_core.plugin_api import <names>`` (and ``extra``) loads, in a fresh interpreter."""
    code = _PROBE.format(names=", ".join(names), extra=extra)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    measured: dict[str, dict[str, int]] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


def test_the_backend_surface_loads_at_most_5000_lines_of_the_core() -> None:
    measured = measure(*aitune_core.plugin_api.__all__)
    loaded = measured["loaded"]
    total = sum(loaded.values())
    biggest = ", ".join(f"{name} ({count})" for name, count in sorted(loaded.items(), key=lambda x: -x[1])[:8])
    assert total <= CLOSURE_BUDGET, f"the backend surface loads {total} lines in {len(loaded)} modules: {biggest}"
    # It is the kernel and nothing above it: no engine package, no plugin manager, no pytest.
    above = ("evaluate", "executors", "strategies", "reporting", "checkpoint", "tuning", "module", "partition", "jit")
    above += ("plugins.manager", "plugins.registry", "plugins.loader", "testing")
    reached = [name for name in loaded if name.removeprefix("aitune_core.").startswith(above)]
    assert reached == [], f"the backend surface loads the engine: {reached}"
    assert measured["third_party"] == []


def test_the_modules_defining_the_backend_surface_stay_under_3500_lines() -> None:
    definers = measure(*aitune_core.plugin_api.__all__)["definers"]
    assert "aitune_core.backends.base" in definers and "aitune_core.plugins.hookspecs" in definers
    assert sum(definers.values()) <= DEFINERS_BUDGET, definers


def test_the_measure_sees_what_an_executor_name_pulls_in() -> None:
    """The probe counts package ``__init__``s and everything they load: executor names weigh much more."""
    import aitune_core.plugin_api.executors as executors

    backend_only = measure("Backend")["loaded"]
    extra = f"from aitune_core.plugin_api.executors import {', '.join(executors.__all__)}"
    with_executors = measure("Backend", extra=extra)["loaded"]
    assert "aitune_core.evaluate.candidate" in with_executors and "aitune_core.evaluate.candidate" not in backend_only
    assert sum(with_executors.values()) > sum(backend_only.values()) + 1_000


@pytest.mark.together  # an interpreter that sees every installed distribution
def test_import_aitune_core_loads_neither_torch_nor_pytest_nor_plugins() -> None:
    code = "import sys, aitune_core; print(sorted(m for m in ('torch', 'pytest', 'pluggy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
