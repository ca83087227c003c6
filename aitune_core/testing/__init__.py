"""Test helpers for backend and plugin authors, as an opt-in pytest plugin.

Enable it in a test module or the root ``conftest.py``::

    pytest_plugins = ["aitune_core.testing"]

Fixtures: ``aitune_fake_dist`` writes a fake installed distribution and puts it on
``sys.path``; ``aitune_isolated_plugins`` loads a plugin registry that sees only the
distributions you give it; ``aitune_clean_plugin_env`` unsets the environment variables
that choose plugins (``AITUNE_PLUGINS`` and its siblings); ``aitune_one_thread`` runs
torch on one thread, in the test and in the processes it starts.
:class:`BackendConformance` is the suite every backend passes: subclass it and provide
``make_backend()``.

What the shipped plugins' tests share, importable on its own:
:mod:`~aitune_core.testing.models` (tiny models and their calls),
:mod:`~aitune_core.testing.timing` (steady timers and short profiles),
:mod:`~aitune_core.testing.exported` (the call paths of exported-graph backends),
:mod:`~aitune_core.testing.recording` (a graph recorded as ``tune()`` records it),
:mod:`~aitune_core.testing.child_process` (a fresh interpreter importing the same
sources), :mod:`~aitune_core.testing.packaging` (the entry point, declared and
installed), :mod:`~aitune_core.testing.checkpoint_fuzz` and
:mod:`~aitune_core.testing.engine` (what plugin tests look at inside a run, so that they
import the core only through ``plugin_api``, ``testing`` and ``aitune_core``). Two more
pytest plugins are opt-in, since their fixtures apply to every test or take common names:
:mod:`~aitune_core.testing.isolation` (default config per test, failed loads change
nothing) and :mod:`~aitune_core.testing.recorded` (the tiny models, recorded).

PYTEST_DONT_REWRITE: this file holds no asserts. The suite's asserts live in the
submodules, which are registered for pytest's assertion rewriting before they are
imported, so failures show the compared values whichever way the package is loaded.
"""

import pytest

pytest.register_assert_rewrite(
    "aitune_core.testing.conformance", "aitune_core.testing.fixtures", "aitune_core.testing.outputs"
)

from aitune_core.testing.conformance import BackendConformance, ConformanceRun  # noqa: E402
from aitune_core.testing.fake_dists import FakeDist, write_fake_dist  # noqa: E402
from aitune_core.testing.fixtures import (  # noqa: E402
    IsolatedPlugins,
    aitune_clean_plugin_env,
    aitune_fake_dist,
    aitune_isolated_plugins,
    aitune_one_thread,
)

__all__ = [
    "BackendConformance",
    "ConformanceRun",
    "FakeDist",
    "IsolatedPlugins",
    "aitune_clean_plugin_env",
    "aitune_fake_dist",
    "aitune_isolated_plugins",
    "aitune_one_thread",
    "write_fake_dist",
]
