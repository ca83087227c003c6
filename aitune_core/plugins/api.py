"""What a plugin is written against: the project name, entry-point group, API version and marker.

This module stays free of pluggy so that ``import aitune_core`` does not pay for the
plugin machinery: ``hookimpl`` only imports pluggy when it decorates something, which
happens while a plugin is being loaded, after pluggy is needed anyway.

The plugin API version is one integer. It goes up when a change would break existing
plugins (a hook removed or its meaning changed); adding hooks or hook arguments does not
change it. A plugin declares the version it targets with a module attribute
``AITUNE_PLUGIN_API = 1``; versions outside ``MIN_SUPPORTED_PLUGIN_API`` ..
``PLUGIN_API_VERSION`` are refused with both versions named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, TypeVar, Unpack, overload

PROJECT_NAME = "aitune"
ENTRY_POINT_GROUP = "aitune.plugins"
PLUGIN_API_VERSION = 1
MIN_SUPPORTED_PLUGIN_API = 1
API_ATTRIBUTE = "AITUNE_PLUGIN_API"

BASELINE_PRIORITY = 0
"""Priority of the eager baseline: every other default candidate is tried before it."""

DEFAULT_PRIORITY = 100
"""Priority a plugin's default candidate gets when it does not say otherwise."""

_F = TypeVar("_F", bound=Callable[..., Any])


class HookimplOptions(TypedDict, total=False):
    """pluggy's options for a hook implementation, as its ``HookimplMarker`` takes them."""

    hookwrapper: bool
    optionalhook: bool
    tryfirst: bool
    trylast: bool
    specname: str | None
    wrapper: bool


class HookimplMarker:
    """``pluggy.HookimplMarker("aitune")``, created on first use.

    Accepts exactly pluggy's options: ``wrapper``, ``hookwrapper``, ``optionalhook``,
    ``tryfirst``, ``trylast`` and ``specname``.
    """

    @overload
    def __call__(self, function: _F, **options: Unpack[HookimplOptions]) -> _F: ...

    @overload
    def __call__(self, function: None = ..., **options: Unpack[HookimplOptions]) -> Callable[[_F], _F]: ...

    def __call__(self, function: _F | None = None, **options: Unpack[HookimplOptions]) -> _F | Callable[[_F], _F]:
        import pluggy

        return pluggy.HookimplMarker(PROJECT_NAME)(function, **options)

    def __repr__(self) -> str:
        return f"<hookimpl marker for {PROJECT_NAME!r} plugins>"


hookimpl = HookimplMarker()
"""Marks a function of a plugin module as the implementation of an ``aitune_*`` hook."""
