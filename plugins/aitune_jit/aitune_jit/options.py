"""What ``ait.jit.enable`` (or ``AITUNE_JIT=1`` with ``AITUNE_JIT_*`` variables) is told.

Every option can come from the environment, so that a script that never imports
aitune can be tuned and steered: ``AITUNE_JIT=1 AITUNE_JIT_DEPTH=1 python serve.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from aitune_core.config import env_text, parse_flag


def _non_negative(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"ait.jit option {attribute.name} must be >= 0, got {value!r}")


def _at_least_one(_instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ValueError(f"ait.jit option {attribute.name} must be >= 1, got {value!r}")


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    return tuple(item.strip() for item in value if item and item.strip())


@attrs.frozen
class JitOptions:
    """Which modules to tune, when, and with what.

    depth: how far below the model the tuned modules sit. 0 tunes the model as one
        module (one graph set, the fewest compiles); 1 tunes each of its children, and so on.
    min_params: skip modules with fewer parameters: a count (>= 1), or a share of the
        model's parameters (below 1, e.g. 0.05).
    exclude: dotted glob patterns (as ``ait.wrap`` takes them) of modules never to tune,
        nor anything inside them.
    calls: calls of a module recorded before its tuning starts.
    live_checks: calls kept, while tuning runs, to check the winner against eager before
        it serves; they were not part of the tuning data.
    strategy: the strategy every module is tuned with (None: as ``tune`` chooses).
    backends: names of registered backends to try (``AITUNE_JIT_BACKENDS=inductor_jit``);
        used when no strategy is given.
    executor: where candidates are built (None: ``config.executor``).
    cache: load results stored by an earlier run, and store new ones, under
        ``config.cache_dir / "jit"``.
    trust_native_code: load native-code artifacts (AOT packages) from that cache. The JIT
        wrote them itself into the user's own cache, which the user trusts as they trust
        torch's compile cache; turn off to refuse them (such winners are then tuned again).
    exit_wait_s: at interpreter exit, how long to wait for a tuning in progress to
        finish and be stored (0: do not wait; the work is lost).
    nice: how much lower the tuning thread's CPU priority is than serving's (Linux). 0 by
        default: the thread holds the GIL, so a lower priority makes serving calls wait for
        it, and thread pools it makes for the winner would serve at that priority.
    switch_interval_s: the interpreter's thread switch interval while tuning runs, so that
        serving calls waiting for the GIL get it quickly (``sys.setswitchinterval``).
    """

    depth: int = attrs.field(default=0, validator=_non_negative)
    min_params: float = attrs.field(default=0.0, validator=_non_negative)
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_names)
    calls: int = attrs.field(default=16, validator=_at_least_one)
    live_checks: int = attrs.field(default=4, validator=_at_least_one)
    strategy: Any = None
    backends: tuple[str, ...] = attrs.field(default=(), converter=_names)
    executor: Any = None
    cache: bool = True
    trust_native_code: bool = True
    exit_wait_s: float = attrs.field(default=600.0, validator=_non_negative)
    nice: int = attrs.field(default=0, validator=_non_negative)
    switch_interval_s: float = attrs.field(default=0.0002, validator=_non_negative)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> JitOptions:
        """Options from ``AITUNE_JIT_*`` variables; ``overrides`` (what ``enable`` is given) win."""
        read: dict[str, Any] = {}
        for field in attrs.fields(cls):
            raw = env_text(f"AITUNE_JIT_{field.name.upper()}", environ)
            if not raw or field.name == "strategy":
                continue
            read[field.name] = _parse(field.name, raw, field.default)
        return cls(**{**read, **overrides})


def _parse(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            return parse_flag(f"AITUNE_JIT_{name.upper()}", raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(
            f"AITUNE_JIT_{name.upper()}={raw!r} is not a valid {type(default).__name__}; fix or unset it"
        ) from None
    return raw or None
