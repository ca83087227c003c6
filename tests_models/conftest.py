"""The models matrix: real timm and transformers architectures, tuned end to end.

Needs timm, transformers, aitune-transformers, aitune-inductor, aitune-onnx and
aitune-openvino installed (``python3 -m nox -s tests_models`` installs them). Enables aitune's pytest
plugin, and sets a scripted timer for the whole run, so which candidate serves never
depends on how busy the machine is: every candidate that passes validation measures
twice as fast as eager.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model is built from a config; nothing comes from a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("aitune_core") is None:
    sys.path.insert(0, str(_HERE.parent))

pytest_plugins = ["aitune_core.testing"]

from aitune_core.config import config  # noqa: E402
from aitune_core.testing.isolation import unique_name  # noqa: E402, F401  (the fixture)
from aitune_core.testing.timing import steady_timer  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Inductor cache for the run (unless the caller chose one, as nox does), the scripted timer.

    Session-wide, because each architecture is tuned once per module-scoped fixture and
    its tests then share the tuned model.
    """
    chose_cache = bool(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    if not chose_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    config.reset()
    config.timer = steady_timer()  # which candidate wins never depends on the machine's load
    config.cache_dir = tmp_path_factory.mktemp("aitune-cache")
    try:
        yield
    finally:
        config.reset()
        if not chose_cache:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
