"""Plugin manager access (filled in by the plugin system)."""

from __future__ import annotations

from typing import Any


def extend_converter(converter: Any) -> None:
    return None


def graph_key_parts() -> Any:
    return None
