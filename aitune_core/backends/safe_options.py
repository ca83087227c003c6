"""Allow-lists for the free-form option mappings of backend configs.

A checkpoint's manifest is written by whoever made the checkpoint, and loading it
rebuilds each backend's config from that data. Some backends hand a mapping of
options straight to a compiler or runtime (Inductor options, ONNX Runtime provider
options), and some of those options name a program to run, a command-line flag, a
path or a library to load: a manifest setting them would run its writer's code. So a
free-form mapping accepts only keys on an allow-list, each with a typed rule for its
value, and the error for any other key names the key and the way out:
``unsafe_options=True``, passed in code and never stored in a checkpoint.

Plugins keep their own allow-lists (they know their options); this module holds the
machinery: the rules, :class:`AllowList`, :func:`option_problems` and the attrs
validator :func:`allowed_options`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import attrs

UNSAFE_HINT = "pass unsafe_options=True to the config in code to use it (never stored in checkpoints)"
"""How every refusal ends: the one way to use an option that is not on an allow-list."""

_TRUE_TEXT = ("1", "true", "True")
_FALSE_TEXT = ("0", "false", "False")


class UnsafeOptionError(ValueError):
    """A free-form option that is not known to be safe, or whose value breaks its rule."""


def _shown(value: object) -> str:
    return f"{value!r:.80} ({type(value).__name__})"


@attrs.frozen
class BoolRule:
    """A switch: ``True``/``False``, or as text ``"1"``/``"0"``/``"true"``/``"false"``."""

    def problem(self, value: object, text: bool = False) -> str | None:
        if isinstance(value, bool):
            return None
        if text and isinstance(value, str) and value in _TRUE_TEXT + _FALSE_TEXT:
            return None
        return f"must be True or False, got {_shown(value)}"


@attrs.frozen
class IntRule:
    """A whole number within ``[low, high]`` (either end may be open); never a bool."""

    low: int | None = None
    high: int | None = None

    def bounds(self) -> str:
        if self.low is not None and self.high is not None:
            return f"from {self.low} to {self.high}"
        if self.low is not None:
            return f">= {self.low}"
        if self.high is not None:
            return f"<= {self.high}"
        return "of any size"

    def problem(self, value: object, text: bool = False) -> str | None:
        number: object = value
        if text and isinstance(value, str):
            try:
                number = int(value, 10)
            except ValueError:
                number = None
        if isinstance(number, bool) or not isinstance(number, int):
            return f"must be a whole number {self.bounds()}, got {_shown(value)}"
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            return f"must be a whole number {self.bounds()}, got {value!r}"
        return None


@attrs.frozen
class FloatRule:
    """A finite number within ``[low, high]``; whole numbers count, bools do not."""

    low: float | None = None
    high: float | None = None

    def problem(self, value: object, text: bool = False) -> str | None:
        number: object = value
        if text and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        wanted = f"must be a finite number from {low} to {high}"
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            return f"{wanted}, got {_shown(value)}"
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            return f"{wanted}, got {value!r}"
        return None


@attrs.frozen
class ChoiceRule:
    """One of a fixed set of strings."""

    choices: tuple[str, ...]

    def problem(self, value: object, text: bool = False) -> str | None:
        if isinstance(value, str) and value in self.choices:
            return None
        return f"must be one of {', '.join(map(repr, self.choices))}, got {_shown(value)}"


OptionRule = BoolRule | IntRule | FloatRule | ChoiceRule


@attrs.frozen
class AllowList:
    """The keys of one free-form mapping that a checkpoint may set, and their rules.

    what: what a key is, for errors ("Inductor option").
    rules: key -> rule of its value. Keys that are absent are refused.
    refusals: ``(fnmatch pattern, why)`` pairs explaining refusals ("it names a
        program"); only used for the message, since every key off ``rules`` is refused.
    known: the keys the installed runtime has, when it can say; an allowed key it does
        not have is refused too, so a checkpoint cannot reach an option that a newer
        runtime gave a new meaning.
    text_values: values are text the runtime parses (ONNX Runtime provider options), so
        ``"1"`` is a valid bool and ``"64"`` a valid whole number.
    listed_at: where the allow-list lives, for the error.
    """

    what: str
    rules: Mapping[str, OptionRule]
    refusals: tuple[tuple[str, str], ...] = ()
    known: Callable[[], Collection[str]] | None = None
    text_values: bool = False
    listed_at: str = ""

    def refusal(self, key: str) -> str:
        """Why ``key`` is refused, for the error message."""
        for pattern, why in self.refusals:
            if fnmatch.fnmatchcase(key, pattern):
                return why
        where = f" ({self.listed_at})" if self.listed_at else ""
        return f"it is not on the list of {self.what}s known to be safe to load from a checkpoint{where}"


def option_problems(allow_list: AllowList, field: str, options: Mapping[str, object] | None) -> list[str]:
    """Everything wrong with ``options`` under ``allow_list``, one message per key; empty when it is all allowed."""
    if not options:
        return []
    known = allow_list.known() if allow_list.known is not None else None
    problems = []
    for key, value in options.items():
        name = f"{field}[{key!r}]"
        rule = allow_list.rules.get(key) if isinstance(key, str) else None
        if rule is None:
            problems.append(
                f"{name} is not an allowed {allow_list.what}: {allow_list.refusal(str(key))}; {UNSAFE_HINT}"
            )
            continue
        if known is not None and key not in known:
            problems.append(
                f"{name} is not among the {allow_list.what}s of the installed version; remove it, or install "
                "the version the config was written for"
            )
            continue
        problem = rule.problem(value, allow_list.text_values)
        if problem is not None:
            problems.append(f"{name} {problem}")
    return problems


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def allowed_options(allow_list: AllowList | Callable[[Any], AllowList]) -> Validator:
    """An attrs validator that refuses keys and values off ``allow_list``.

    ``allow_list`` may be a function of the config instance, for mappings whose keys
    depend on another field (ONNX Runtime's provider). Attrs runs validators once every
    field is set, so the function may read any of them. A config made with
    ``unsafe_options=True`` skips the check.
    """

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Mapping[str, object] | None) -> None:
        if value is None or getattr(instance, "unsafe_options", False):
            return
        chosen = allow_list if isinstance(allow_list, AllowList) else allow_list(instance)
        problems = option_problems(chosen, attribute.name, value)
        if problems:
            raise UnsafeOptionError("; ".join(problems))

    return check
