"""Every load in these tests that fails must leave the model exactly as it was."""

from __future__ import annotations

import pytest

from aitune_core.testing.load_guard import guard_failed_loads


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return guard_failed_loads(monkeypatch)
