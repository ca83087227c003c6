"""The files of a new plugin project, as :class:`string.Template` texts.

They live in Python strings rather than package data so that ``aitune new-plugin`` works
from any install of aitune-core without a data-file declaration to keep in step.
Placeholders (``$package``, ``$cls``, ...) are filled in by
:func:`aitune_core.authoring.new_plugin.render`; a literal dollar sign is ``$$``.
"""

from __future__ import annotations

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$distribution"
version = "0.1.0"
description = "An aitune backend plugin: $plugin."
readme = "README.md"
requires-python = ">=3.11"
# torch comes through aitune-core. Naming it here too, with another bound, could make pip
# pick a different torch build (a multi-GB CUDA one) than the one already installed.
dependencies = ["$core_requirement", "attrs>=23.1"]

[project.optional-dependencies]
test = ["pytest>=8"]

# The line that makes aitune find the plugin: group "aitune.plugins", name = the plugin's
# name in `aitune plugins`, value = the plugin module.
[project.entry-points."aitune.plugins"]
$plugin = "$package.plugin"

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.ruff]
line-length = 120

[tool.ruff.lint]
extend-select = ["I"]

[tool.ruff.lint.isort]
known-first-party = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
filterwarnings = ["ignore::DeprecationWarning:torch.*", "ignore:Failed to initialize NumPy:UserWarning"]

# Read by the aitune repository's own noxfile, should this project move into its plugins/ folder.
[tool.aitune.nox]
backends = ["$plugin"]
"""

INIT = '''\
"""$plugin: an aitune backend plugin.

TODO: say in one line what your backend does, and for which models and devices.
"""

from $package.backend import (
    ${cls}Backend,
    ${cls}Config,
)

__all__ = ["${cls}Backend", "${cls}Config"]
__version__ = "0.1.0"
'''

BACKEND = '''\
"""${cls}Backend: runs a copy of the module until your compiler takes its place.

The skeleton works as it is: it builds, survives a checkpoint, matches eager and passes
aitune's conformance suite, so each change you make is checked against a working start.
It is not faster than eager, so tuning will not pick it yet. Put your compiler where the
TODO markers are: ``_compile`` first, then ``availability`` and, for a compiler that
writes files, ``is_jit`` and the persistence methods at the end.

The lifecycle (build, activate, deactivate, deploy) and its checks are aitune's: a
backend only fills in the steps. See docs/writing-a-backend.md in the aitune repository.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import torch
from aitune_core.plugin_api import Availability, Backend, BackendConfig, BuildContext


@attrs.frozen
class ${cls}Config(BackendConfig):
    """Everything that tells two ${cls}Backend instances apart.

    Keys, ``describe()`` and checkpoints are made from the config, and checkpoints
    rebuild it from JSON, so each field validates its value and keeps to types cattrs
    stores as they are (bool, int, float, str, enums, torch.dtype).
    """

    # TODO: your compiler's options. `level` is an example: the skeleton ignores it.
    level: int = attrs.field(default=1, validator=[attrs.validators.instance_of(int), attrs.validators.in_(range(4))])


class ${cls}Backend(Backend):
    name = "$plugin"  # checkpoints store this name: never change it once released
    config_class = ${cls}Config
    supported_devices = ("cpu", "cuda")
    config: ${cls}Config

    def __init__(self, config: ${cls}Config | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._compiled: torch.nn.Module | None = None

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        # TODO: when your compiler's library is missing, return Availability.no("mycompiler not
        # importable"). Look for it with importlib.util.find_spec, without importing it: this
        # runs whenever plugins are listed.
        return super().availability(device)

    @property
    def is_jit(self) -> bool:
        # True: rebuilt from the user's module when activated, so a checkpoint holds no files.
        # TODO: a compiler that writes its output to files returns False and ships them: see
        # _artifacts, _extra_state and _restore below.
        return True

    # ------------------------------------------------------------------ lifecycle
    def _build(self, context: BuildContext) -> None:
        self._compiled = self._compile(context)

    def _activate(self) -> None:
        if self.context is None:
            raise RuntimeError(f"{type(self).__name__} rebuilds from the module; pass a BuildContext to activate")
        self._compiled = self._compile(self.context)

    def _deactivate(self) -> None:
        self._compiled = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._compiled is not None
        return self._compiled(*args, **kwargs)

    def _compile(self, context: BuildContext) -> torch.nn.Module:
        """What inference runs for one graph of ``context.module``.

        TODO: call your compiler here. It may use:

        * ``context.module``: the user's module. Never change it (its modes, parameters
          or buffers): eager, the fallback and other candidates still run it. Compile a
          copy, as below.
        * ``context.graph_spec``: the input and output tensors recorded for this graph,
          with their min, opt and max shapes (``graph_spec.shapes("max")``).
        * ``context.samples``: recorded calls, kept on the CPU; may be empty after a
          checkpoint is loaded. ``context.signature.bind(sample.arguments)`` gives the
          ``(args, kwargs)`` to call the module with.
        * ``context.device``, ``self.config.level``.
        * ``context.cache_dir``: an empty folder for this build alone; write files there.
        """
        return copy.deepcopy(context.module)

    # ------------------------------------------------------------------ persistence
    # TODO: a compiler that writes files (is_jit False) ships them in checkpoints:
    #
    # def _artifacts(self) -> dict[str, Path]:
    #     return {"engine": self._engine_path}  # files written under context.cache_dir
    #
    # def _extra_state(self) -> dict[str, Any]:
    #     return {"input_names": self._input_names}  # JSON data; never a path
    #
    # def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
    #     self._engine_path = artifacts["engine"]  # where the file is now
    #     self._input_names = extra["input_names"]
'''

PLUGIN = '''\
"""The module the ``aitune.plugins`` entry point names.

aitune imports it the first time something needs its plugin registry, whether or not
this backend is ever used, so keep it light: import your compiler inside the backend's
methods, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from aitune_core.plugin_api import DEFAULT_PRIORITY, Backend, Candidate, hookimpl

from $package.backend import ${cls}Backend

AITUNE_PLUGIN_API = 1
"""The plugin API this module is written against; aitune-core refuses versions it does not support."""

PRIORITY = DEFAULT_PRIORITY - 50
"""Where strategies try this backend among the defaults: higher first, ties by backend name.

The eager baseline is 0. The plugins shipped with aitune use 82 to 130 (TensorRT 130,
Inductor 120 and 110, ONNX Runtime 100, torchao 90 and below), so 50 lets them go first.
TODO: raise it once this backend is known to beat them on the devices it offers itself for.
"""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [${cls}Backend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """Offered to users who name no backend; None on devices it cannot run on."""
    if torch.device(device).type not in ${cls}Backend.supported_devices:
        return None
    return [Candidate(${cls}Backend(), priority=PRIORITY)]
'''

CONFTEST = '''\
"""Enables aitune's pytest plugin, and lets the tests run from this folder before it is installed."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("$package") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["aitune_core.testing"]
'''

TEST = '''\
"""The conformance suite for ${cls}Backend, and what it promises besides."""

from __future__ import annotations

from typing import Any

import aitune_core
import pytest
import torch
from aitune_core.plugins import PluginStatus
from aitune_core.testing import BackendConformance

from $package import ${cls}Backend
from $package.plugin import PRIORITY


class Test${cls}Conformance(BackendConformance):
    """The state machine, checkpoints, keys and outputs at the recorded shapes, as tuning relies on them."""

    batch_sizes = (1, 2, 4)  # at least two, so the recorded graph has a batch axis
    # None keeps torch.testing.assert_close's defaults; a compiler that reorders float math
    # may need rtol = 1e-4 and atol = 1e-5.
    rtol = None
    atol = None

    def make_backend(self) -> ${cls}Backend:
        return ${cls}Backend()

    def make_other_backend(self) -> ${cls}Backend:
        return ${cls}Backend(level=2)

    # TODO: a model like the ones your backend is for (the default is a small MLP), and its inputs.
    def make_model(self) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def make_inputs(self, batch_size: int) -> tuple[torch.Tensor]:
        return (torch.randn(batch_size, 8),)


def test_config_checks_its_values() -> None:
    """Checkpoints rebuild configs from data, so a bad value is refused when the config is made."""
    with pytest.raises(ValueError, match="level"):
        ${cls}Backend(level=7)
    with pytest.raises(TypeError, match="level"):
        ${cls}Backend(level="2")


def test_discovered_through_its_entry_point(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """The entry point pyproject.toml declares, pointed at the importable package, loads the plugin."""
    dist = aitune_fake_dist(
        "$distribution",
        module="$package.plugin",
        entry_points={"$plugin": "$package.plugin"},
    )
    aitune_isolated_plugins.load(dist)
    backend = ${cls}Backend
    record = aitune_core.plugins()[1]
    assert record.status is PluginStatus.LOADED, record.reason
    assert record.backends == (backend.name,)
    assert aitune_core.plugins.get_backend_class(backend.name) is backend
    candidates = [(c.name, c.priority) for c in aitune_core.plugins.default_candidates("cpu")]
    assert candidates == [(backend.name, PRIORITY), ("eager", 0)]
'''

NOXFILE = '''\
"""Installs this plugin in a fresh virtualenv, with a chosen aitune-core, and runs its tests.

    python -m nox                                   # aitune-core as below, torch as constraints.txt pins it
    AITUNE_CORE=aitune-core==0.2.0 python -m nox    # another release
    AITUNE_CORE=../aitune python -m nox             # a source checkout
    AITUNE_CONSTRAINTS= python -m nox               # no torch pin: bring your own (a CUDA build)

AITUNE_CORE is a requirement or a path. Unset, it is the source checkout this project was
generated from, while that folder still exists, and ``$core_requirement`` otherwise.
AITUNE_CONSTRAINTS is a pip constraints file; unset, constraints.txt beside this file,
which pins the torch the generator saw. Without a pin, pip may pick a multi-GB CUDA torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nox

HERE = Path(__file__).resolve().parent
DISTRIBUTION = "$distribution"
BACKENDS = ["$plugin"]
SOURCE_CHECKOUT = $source_checkout
"""Where `aitune new-plugin` ran from, when that was a source checkout of aitune-core."""
RELEASED_CORE = "$core_requirement"

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


def aitune_core() -> str:
    value = os.environ.get("AITUNE_CORE", "").strip()
    if value:
        path = Path(value).expanduser()
        if path.exists():
            return str(path.resolve())
        if value.startswith((".", "/", "~")) or os.sep in value:
            raise SystemExit(f"AITUNE_CORE={value}: no such folder; give a path to aitune-core or a requirement")
        return value
    if SOURCE_CHECKOUT and (Path(SOURCE_CHECKOUT) / "pyproject.toml").is_file():
        return SOURCE_CHECKOUT
    return RELEASED_CORE


def constraints() -> list[str]:
    path = os.environ.get("AITUNE_CONSTRAINTS", str(HERE / "constraints.txt"))
    return ["-c", path] if path else []


def check_listing(session: nox.Session) -> None:
    """`aitune plugins` lists this plugin as loaded, with its backends: the entry point works once installed."""
    listing = json.loads(session.run("aitune", "plugins", "--json", silent=True, stderr=None))
    found = [p for p in listing["plugins"] if p["distribution"] == DISTRIBUTION]
    if not found:
        session.error(f"aitune plugins does not list {DISTRIBUTION}: is the entry point in pyproject.toml?")
    for plugin in found:
        status, listed = plugin["status"], plugin["backends"]
        if status != "loaded" or sorted(listed) != sorted(BACKENDS):
            reason = f"{status} {listed} ({plugin['reason']})"
            session.error(f"aitune plugins lists {DISTRIBUTION} {reason}; expected loaded {BACKENDS}")
        session.log(f"aitune plugins: {DISTRIBUTION} loaded, backends {listed}")


@nox.session
def tests(session: nox.Session) -> None:
    """This plugin installed from its pyproject.toml: listed by `aitune plugins`, then its tests."""
    core = aitune_core()
    session.log(f"aitune-core from {core}")
    session.install(*constraints(), core, ".", "pytest>=8")
    check_listing(session)
    # importlib mode: the tests import the installed package, not the source folder beside them.
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    session.run("pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *session.posargs, env=env)
'''

CONSTRAINTS = """\
# Pins for `python -m nox` (override with AITUNE_CONSTRAINTS=path, or AITUNE_CONSTRAINTS= for none).
# The torch that `aitune new-plugin` saw was $torch_seen. Without a pin, pip may pick
# another build, on Linux a multi-GB CUDA one. To get the CPU-only build of the pinned
# version on Linux, also set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
$torch_pin
"""

README = """\
# $distribution

An aitune backend plugin: backend `$plugin` (`$package.${cls}Backend`), plugin module
`$package.plugin`.

TODO: what the backend does, for which models and devices, and what it needs installed.

## Layout

* `pyproject.toml`: the distribution, and the entry point that makes aitune find the
  plugin: `$plugin = "$package.plugin"` in the group `aitune.plugins`.
* `$package/backend.py`: `${cls}Backend` and `${cls}Config`; your compiler goes at the
  TODO markers.
* `$package/plugin.py`: `AITUNE_PLUGIN_API` and the hooks: registers the backend and
  offers it as a default candidate.
* `tests/test_$package.py`: aitune's conformance suite (`BackendConformance`) and the
  plugin's own tests; `conftest.py` enables aitune's pytest plugin.
* `noxfile.py` and `constraints.txt`: a fresh virtualenv with aitune-core and the pinned
  torch, in which the plugin is installed and tested.

As generated, the backend runs a deep copy of the module: it passes the conformance
suite but is no faster than eager. Replace `_compile` in `$package/backend.py` with your
compiler, keep the suite passing, and add tests of your own.

## Test

In a fresh virtualenv, with the aitune-core this project was made with and the torch that
`constraints.txt` pins:

```console
$$ python -m nox
```

`AITUNE_CORE` picks another aitune-core (a requirement such as `aitune-core==0.2.0`, or
the path to a source checkout); `AITUNE_CONSTRAINTS` another constraints file, or none
when empty (on a GPU machine, to keep the CUDA torch you installed). Arguments after
`--` go to pytest: `python -m nox -- -k conformance -x`.

In an environment of your own, where torch and aitune-core are already installed:

```console
$$ pip install -e ".[test]"
$$ pytest
$$ aitune plugins
$$ aitune plugins check $distribution
```

`aitune plugins` lists `$distribution` as loaded, with the backend `$plugin`.
`aitune plugins check` runs the conformance suite on the installed plugin, with the
default config, on a small MLP: the check anyone who installs the plugin can repeat.

## Priority

`$package/plugin.py` offers the backend to users who name none, at priority
`PRIORITY` (50): after the plugins shipped with aitune (82 to 130) and before the eager
baseline (0). Raise it once the backend is known to win.
"""

GITIGNORE = """\
__pycache__/
*.egg-info/
build/
dist/
.nox/
.pytest_cache/
"""
