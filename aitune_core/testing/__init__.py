"""Test helpers for backend and plugin authors, as an opt-in pytest plugin.

Enable it in a test module or the root ``conftest.py``::

    pytest_plugins = ["aitune_core.testing"]

Fixtures: ``aitune_fake_dist`` writes a fake installed distribution and puts it on
``sys.path``; ``aitune_isolated_plugins`` loads a plugin registry that sees only the
distributions you give it. :class:`BackendConformance` is the suite every backend
passes: subclass it and provide ``make_backend()``.

PYTEST_DONT_REWRITE: this file holds no asserts. The suite's asserts live in the
submodules, which are registered for pytest's assertion rewriting before they are
imported, so failures show the compared values whichever way the package is loaded.
"""

import pytest

pytest.register_assert_rewrite("aitune_core.testing.conformance", "aitune_core.testing.fixtures")

from aitune_core.testing.conformance import BackendConformance, ConformanceRun  # noqa: E402
from aitune_core.testing.fake_dists import FakeDist, write_fake_dist  # noqa: E402
from aitune_core.testing.fixtures import IsolatedPlugins, aitune_fake_dist, aitune_isolated_plugins  # noqa: E402

__all__ = [
    "BackendConformance",
    "ConformanceRun",
    "FakeDist",
    "IsolatedPlugins",
    "aitune_fake_dist",
    "aitune_isolated_plugins",
    "write_fake_dist",
]
