"""Validators shared by the backend configs: fail when the config is made, not mid-build."""

from __future__ import annotations

from typing import Any

import attrs

_SCALARS = (str, int, float, bool)


def options_dict(value: Any) -> dict[str, Any] | None:
    """A private copy, so a caller changing their dict later does not change the config."""
    return None if value is None else dict(value)


def check_options(instance: Any, attribute: attrs.Attribute[Any], value: dict[str, Any] | None) -> None:
    """Inductor options must survive a checkpoint: string keys, JSON scalar values.

    Callables (such as ``guard_filter_fn``) cannot be written into a checkpoint, and a
    backend restored without them would silently compile differently.
    """
    if value is None:
        return
    for key, option in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{attribute.name} keys must be Inductor option names (str), got {key!r}")
        if not isinstance(option, _SCALARS):
            raise TypeError(
                f"{attribute.name}[{key!r}] must be a str, int, float or bool so that it can be saved "
                f"with the checkpoint, got {type(option).__name__}"
            )
