"""Running a backend lifecycle step with the plugins' observers and wrappers around it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_step(step: str, backend: Any, action: Callable[[], None]) -> None:
    action()
