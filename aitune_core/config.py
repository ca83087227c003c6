"""Process-wide settings, read as ``aitune_core.config.<name>``, and the ``AITUNE_*`` environment.

Values are checked when they are set, so a typo'd value fails at the assignment that
made it rather than deep inside a tuning run.

Every ``AITUNE_*`` variable is read here (:func:`env_text`, :func:`env_flag`), so each
is parsed one way and a wrong value is refused with its name: ``AITUNE_CACHE_DIR``,
``AITUNE_SPOT_CHECK_EVERY``, ``AITUNE_EXECUTOR``, ``AITUNE_ALLOW_LOSSY``, ``AITUNE_STORE``, ``AITUNE_CACHE_MAX_MB``,
``AITUNE_STORE_MAX_MB``, ``AITUNE_PARALLEL_BUILDS`` and ``AITUNE_ON_WEIGHT_CHANGE`` (defaults of the settings below),
``AITUNE_MAX_BATCH_SIZE`` (``data``), ``AITUNE_LOG_LEVEL`` and ``AITUNE_LOG_FORMAT``
(``log``), ``AITUNE_PLUGINS``, ``AITUNE_DISABLED_PLUGINS`` and ``AITUNE_STRICT_PLUGINS``
(``plugins.loader``), and the ``aitune-jit`` distribution's ``AITUNE_JIT_<OPTION>``
(``aitune_jit.options``). The one exception is ``AITUNE_JIT`` itself:
``aitune_jit/startup.py`` reads it at interpreter start, before anything of aitune may
be imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from aitune_core.names import is_valid_name

_TRUE_TEXT = ("1", "true", "yes", "on")
_FALSE_TEXT = ("", "0", "false", "no", "off")


def env_text(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the environment variable ``name``, stripped; "" when it is unset.

    environ: where to read instead of ``os.environ`` (tests, a child's environment).
    """
    return (os.environ if environ is None else environ).get(name, "").strip()


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no variable (see :func:`parse_flag`); unset or empty is no."""
    return parse_flag(name, env_text(name, environ))


def parse_flag(name: str, text: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``, in any case; anything else is a ValueError naming ``name``."""
    value = text.strip().lower()
    if value in _TRUE_TEXT:
        return True
    if value in _FALSE_TEXT:
        return False
    raise ValueError(f"{name} must be 1 or 0 (or true/false, yes/no, on/off), got {text!r}")


def _default_cache_dir() -> Path:
    env = env_text("AITUNE_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aitune"


def _positive_int(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.{attribute.name} must be a whole number of at least 1, got {value!r}")


def _one_of(*choices: str) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in choices:
            raise ValueError(f"config.{attribute.name} must be one of {', '.join(map(repr, choices))}, got {value!r}")

    return check


def _to_path(value: Any) -> Path:
    return Path(value).expanduser()


def _default_executor() -> str:
    return env_text("AITUNE_EXECUTOR") or "auto"


def _default_parallel_builds() -> int | None:
    text = env_text("AITUNE_PARALLEL_BUILDS")
    if text.lower() in ("", "auto"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"AITUNE_PARALLEL_BUILDS must be a whole number of at least 1 or 'auto', got {text!r}")
    return int(text)


def _optional_positive_int(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _positive_int(_instance, attribute, value)


def _default_allow_lossy() -> bool:
    return env_flag("AITUNE_ALLOW_LOSSY")


def _default_spot_check_every() -> int:
    text = env_text("AITUNE_SPOT_CHECK_EVERY")
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"AITUNE_SPOT_CHECK_EVERY must be a whole number of calls (0: off), got {text!r}")
    return int(text)


def _optional_non_negative_int(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _non_negative_int(_instance, attribute, value)


def _env_weight_change() -> str:
    return env_text("AITUNE_ON_WEIGHT_CHANGE").lower() or "refit"


def _default_store() -> bool:
    text = env_text("AITUNE_STORE")
    return True if not text else parse_flag("AITUNE_STORE", text)


def _env_megabytes(name: str) -> int | None:
    """A whole number of MiB of at least 1 from the variable ``name``; None when it is unset."""
    text = env_text(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} must be a whole number of MiB of at least 1, got {text!r}")
    return value


DEFAULT_CACHE_MAX_MB = 10240


def _default_cache_max_mb() -> int:
    value = _env_megabytes("AITUNE_CACHE_MAX_MB")
    return DEFAULT_CACHE_MAX_MB if value is None else value


def _default_store_max_mb() -> int | None:
    return _env_megabytes("AITUNE_STORE_MAX_MB")


def _boolean(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"config.{attribute.name} must be True or False, got {value!r}")


def _non_negative_int(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"config.{attribute.name} must be a whole number of at least 0, got {value!r}")


def _positive_seconds(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"config.{attribute.name} must be a positive number of seconds, got {value!r}")


def _fraction(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"config.{attribute.name} must be a number from 0 up to (not including) 1, got {value!r}")


def _is_a(value: Any, module: str, name: str) -> bool:
    """``isinstance(value, module.name)`` without importing ``module``: settings sit below every other layer."""
    return any(cls.__module__ == module and cls.__qualname__ == name for cls in type(value).__mro__)


_accepted: dict[str, type] = {}
"""``setting -> base class`` of the objects a setting takes besides a name (see :func:`accept_instances`)."""


def accept_instances(setting: str, base: type) -> None:
    """Let ``config.<setting>`` hold instances of ``base`` as well as a name; the module defining ``base`` calls it.

    Settings sit below every other layer, so they never import nor name the types they
    take. No instance of ``base`` can exist before its module has run, so the check is
    in place before any value it has to accept.
    """
    _accepted[setting] = base


def _name_or_accepted(what: str) -> Any:
    """A validator: a lowercase name (resolved when used, as plugins load late), or an accepted instance."""

    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        base = _accepted.get(attribute.name)
        if base is not None and isinstance(value, base):
            return
        if not is_valid_name(value):
            raise ValueError(f"config.{attribute.name} must be {what}, got {value!r}")

    return check


def _timer_choice(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not _is_a(value, "aitune_core.profiling.timer", "Timer"):
        raise ValueError(f"config.{attribute.name} must be a Timer (or None for the wall clock), got {value!r}")


@attrs.define(on_setattr=[attrs.setters.convert, attrs.setters.validate])
class Config:
    """aitune's settings.

    strict_mode: non-tensor arguments take part in graph keys (a different ``mode="eval"``
        is a different graph). Off, only tensors and the call's structure count.
    max_num_samples_stored: recorded calls kept per graph for building and validation.
    max_distinct_values_per_argument: in strict mode, how many distinct non-tensor values
        one argument may take before new values stop creating graphs. A float such as a
        temperature that changes on every call would otherwise create a graph per call;
        past the limit such calls run eagerly, with one warning naming the argument.
    cache_dir: where backends write what they build: a private folder per candidate under ``builds/``,
        named after the weights, graph and backend it was built from, kept while something serves
        from it; the artifact store is ``store/``, loads deploy under ``loaded/``. All of it counts
        against ``cache_max_mb``.
    fallback: what a tuned module does with a call it was not tuned for (an unseen graph or a
        shape outside the tuned range): ``"eager"`` runs the original module, ``"raise"`` raises.
    on_all_candidates_failed: when no candidate of a graph survives, ``"eager"`` keeps that
        graph eager and goes on; ``"raise"`` stops the tuning.
    executor: where candidates are built, validated and profiled: ``"auto"`` (the default,
        read from ``AITUNE_EXECUTOR`` when set: in this process, or side by side in child
        processes when the machine can build several at once, see ``parallel_builds``),
        ``"inprocess"``, ``"subprocess"``, a name a plugin registers (``"ray"``), or an
        executor object (the executors package lets this setting take its instances).
        Names are resolved when tuning starts, since plugins load only then.
    parallel_builds: how many candidates the ``"auto"`` executor builds at once. None (the
        default, or ``AITUNE_PARALLEL_BUILDS=auto``) chooses from this machine's cores and
        memory (see :mod:`aitune_core.executors.build_slots`); 1 builds in this process,
        one after another, as a machine with one core always does.
    allow_lossy: let strategies try the plugins' default candidates that change the numbers
        on purpose (quantization, reduced precision: ``Backend.lossy``). Off unless
        ``AITUNE_ALLOW_LOSSY=1``, so that a user who asked for nothing gets eager's numbers.
        Backends named in a strategy, and every candidate of a strategy given tolerances,
        are tried whatever this says.
    timer: where profiling takes its times when a strategy is given none: None is the
        wall clock. Tests and benches set a
        :class:`~aitune_core.profiling.timer.ScriptedTimer`, so that which backend wins
        does not depend on how busy the machine is.
    partition: when no compiled candidate of a graph builds and validates, tune the
        module's submodules instead and keep its own forward between them (``tune``'s
        ``partition=`` overrides it). Off by default: the graph stays eager.
    partition_max_depth: how many levels below a wrapped module partitioning descends
        (1: its children only).
    partition_min_params: children with fewer parameters stay eager without a build.
    partition_min_time_share: children that take less than this fraction of the module's
        eager time (measured on the recorded samples) stay eager without a build. 0 tries
        every child, and keeps which children are tried independent of the clock.
    profile_cap_s: the most seconds of profiling one ``tune()`` spends in all. Each
        comparison measures until its verdicts are clear (clean rounds, not seconds:
        see :mod:`aitune_core.profiling.compare`); this cap, stated when tuning starts,
        bounds them all together. Once spent, comparisons stop as soon as they have an
        interval, and the summary says so.
    spot_check_every: also run one routed call in this many (per wrapped module) on the
        original module, right after the backend has answered, and compare; a backend that
        answers outside its validation tolerances is dropped and the original module serves
        its calls from then on, with a warning (see :mod:`aitune_core.module.spot_check`).
        0 or None (the default; ``AITUNE_SPOT_CHECK_EVERY``) is off: a routed call then
        reads this setting and does nothing more. Measured on a small MLP (64-256-64, batch
        1, one thread, 33 us a routed call; ``python -m bench spot_check``): an unchecked
        call pays 0.2-0.5 us, a checked one about 0.3 ms (a copy of its inputs, an eager
        call, the comparison); per call, amortized, 0.5 us at 1000 and 3 us at 100.
    store: keep what each candidate built and validated in the artifact store
        (``<cache_dir>/store``, see :mod:`aitune_core.store`), and load a candidate from there
        instead of building it again when the same graph of the same weights is tuned with
        the same backend, config, plugin version, torch and device. On unless
        ``AITUNE_STORE=0``.
    cache_max_mb: the cap in MiB on everything aitune keeps under ``cache_dir``
        (``AITUNE_CACHE_MAX_MB``, default 10240): the store, build folders, exports, loaded
        checkpoints and the rest (see :mod:`aitune_core.store.usage`). Past it, what was used
        longest ago is removed, each removal logged, after every stored build and at the end
        of every ``tune()``; what a running process uses is never removed, and folders of
        processes that are gone are removed whatever the cap. ``aitune cache prune`` applies
        it by hand.
    store_max_mb: deprecated, kept for compatibility: a cap in MiB on the store alone, within
        ``cache_max_mb`` (``AITUNE_STORE_MAX_MB``). None (the default): the store shares
        ``cache_max_mb`` with the rest of the cache.
    on_weight_change: new weights are ``"refit"``, ``"eager"`` or ``"raise"`` (AITUNE_ON_WEIGHT_CHANGE; docs/refit.md).
    """

    strict_mode: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    max_num_samples_stored: int = attrs.field(default=4, validator=_positive_int)
    max_distinct_values_per_argument: int = attrs.field(default=8, validator=_positive_int)
    cache_dir: Path = attrs.field(factory=_default_cache_dir, converter=_to_path)
    fallback: Literal["eager", "raise"] = attrs.field(default="eager", validator=_one_of("eager", "raise"))
    on_all_candidates_failed: Literal["eager", "raise"] = attrs.field(
        default="eager", validator=_one_of("eager", "raise")
    )
    executor: Any = attrs.field(
        factory=_default_executor,
        validator=_name_or_accepted("an executor name such as 'inprocess', 'subprocess' or 'ray', or an executor"),
    )
    parallel_builds: int | None = attrs.field(factory=_default_parallel_builds, validator=_optional_positive_int)
    allow_lossy: bool = attrs.field(factory=_default_allow_lossy, validator=_boolean)
    timer: Any = attrs.field(default=None, validator=lambda *args: _timer_choice(*args))
    """An ``aitune_core.profiling.timer.Timer``, or None for the wall clock."""
    partition: bool = attrs.field(default=False, validator=_boolean)
    partition_max_depth: int = attrs.field(default=2, validator=_positive_int)
    partition_min_params: int = attrs.field(default=1, validator=_non_negative_int)
    partition_min_time_share: float = attrs.field(default=0.0, validator=_fraction)
    profile_cap_s: float = attrs.field(default=300.0, validator=_positive_seconds)
    spot_check_every: int | None = attrs.field(factory=_default_spot_check_every, validator=_optional_non_negative_int)
    store: bool = attrs.field(factory=_default_store, validator=_boolean)
    cache_max_mb: int = attrs.field(factory=_default_cache_max_mb, validator=_positive_int)
    store_max_mb: int | None = attrs.field(factory=_default_store_max_mb, validator=_optional_positive_int)
    on_weight_change: str = attrs.field(factory=_env_weight_change, validator=_one_of("refit", "eager", "raise"))

    def reset(self) -> None:
        """Restore every setting to its default (tests and notebooks use this)."""
        fresh = Config()
        for field in attrs.fields(Config):
            setattr(self, field.name, getattr(fresh, field.name))


config = Config()
