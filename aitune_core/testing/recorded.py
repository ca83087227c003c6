"""Opt-in pytest plugin: the tiny models of :mod:`aitune_core.testing.models`, recorded once per test module.

Enable it in a plugin's root ``conftest.py`` (``pytest_plugins = [...,
"aitune_core.testing.recorded"]``) and request a context by name: ``mlp_context``,
``tagger_context``, ``nested_context`` or ``positive_context``, each a
:class:`~aitune_core.backends.base.BuildContext` recorded at batch sizes 2, 4 and 8
(:func:`~aitune_core.testing.recording.record`). Recording is cheap, but backends are
often built once per module from the same context, which is why they live that long.
A conftest fixture of the same name takes precedence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from aitune_core.backends.base import BuildContext
from aitune_core.testing import models
from aitune_core.testing.recording import record

BATCH_SIZES = (2, 4, 8)


def _recorded(name: str, model: Callable[[], torch.nn.Module], make_call: Callable[[int], models.Call]) -> Any:
    """A module-scoped fixture ``<name>_context``: ``model()`` recorded from seed 0, the same in every run."""

    @pytest.fixture(scope="module", name=f"{name}_context")
    def context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
        torch.manual_seed(0)
        return record(model(), make_call, BATCH_SIZES, tmp_path_factory.mktemp(name))

    return context


mlp_context = _recorded("mlp", models.TinyMLP, models.mlp_call)
tagger_context = _recorded("tagger", models.Tagger, models.tagger_call)
nested_context = _recorded("nested", models.Nested, models.nested_call)
positive_context = _recorded("positive", models.Positive, models.positive_call)
