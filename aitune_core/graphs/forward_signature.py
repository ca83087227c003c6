"""Normalising calls against a forward signature.

``module(x, True)``, ``module(x, mask=True)`` and ``module(x=x, mask=True)`` are one
call shape: all become ``{"x": x, "mask": True}``. Binding with ``inspect`` costs tens
of microseconds, so the signature is bound once per *call shape* (number of
positional arguments and keyword names) and the resulting plan is cached; later calls
of that shape only pick values out of ``args`` and ``kwargs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_Plan = tuple[tuple[str, str, Any], ...]


class _Positional:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Keyword:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class ForwardSignature:
    """The parameters of a forward function, and a cached binder for calls to it.

    Signatures behind ``functools.wraps`` and ``functools.partial`` are followed, as
    ``inspect.signature`` does.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and C functions without a signature
            self.signature = None
        self._plans: dict[tuple[int, tuple[str, ...]], _Plan] = {}
        self._bound_as_given: dict[tuple[int, tuple[str, ...]], bool] = {}

    @property
    def parameter_names(self) -> list[str]:
        return [] if self.signature is None else list(self.signature.parameters)

    def normalize(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Return the supplied arguments keyed by parameter name, in signature order.

        Parameters left at their defaults are not included: leaving one out is a
        different call structure from passing it. ``*args`` appear as a tuple and
        ``**kwargs`` as a dict under their own names, sorted by keyword so that the
        order the keywords were written in does not matter.
        """
        shape = (len(args), tuple(kwargs))
        plan = self._plans.get(shape)
        if plan is None:
            plan = self._plan(shape)
            self._plans[shape] = plan
        result: dict[str, Any] = {}
        for name, source, where in plan:
            if source == "p":
                result[name] = args[where]
            elif source == "k":
                result[name] = kwargs[where]
            elif source == "vp":
                result[name] = tuple(args[i] for i in where)
            else:
                result[name] = {key: kwargs[key] for key in where}
        return result

    def as_bound(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], arguments: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call in the form :meth:`bind` gives, the form backends were validated with.

        A compiled backend guards on how it was called (``len(args) == 1``): a user who
        passes ``input_ids=`` by keyword where validation passed it by position would
        make it compile again on the first served call. Calls already in that form
        (most) are passed through; which ones are is worked out once per call shape.
        """
        shape = (len(args), tuple(kwargs))
        as_given = self._bound_as_given.get(shape)
        if as_given is None:
            bound_args, bound_kwargs = self.bind(arguments)
            as_given = len(bound_args) == len(args) and tuple(bound_kwargs) == tuple(kwargs)
            self._bound_as_given[shape] = as_given
        return (args, kwargs) if as_given else self.bind(arguments)

    def bind(self, arguments: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The inverse of :meth:`normalize`: turn named arguments back into a call."""
        if self.signature is None:
            return tuple(arguments.get("args", ())), dict(arguments.get("kwargs", {}))
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        positional = True  # stays True until a positional parameter is missing
        for name, param in self.signature.parameters.items():
            kind = param.kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                args.extend(arguments.get(name, ()))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update(arguments.get(name, {}))
            elif name not in arguments:
                positional = positional and kind is inspect.Parameter.KEYWORD_ONLY
            elif positional and kind is not inspect.Parameter.KEYWORD_ONLY:
                args.append(arguments[name])
            else:
                kwargs[name] = arguments[name]
        return tuple(args), kwargs

    def _plan(self, shape: tuple[int, tuple[str, ...]]) -> _Plan:
        count, names = shape
        if self.signature is None:
            plan: list[tuple[str, str, Any]] = []
            if count:
                plan.append(("args", "vp", tuple(range(count))))
            if names:
                plan.append(("kwargs", "vk", tuple(sorted(names))))
            return tuple(plan)
        bound = self.signature.bind(*(_Positional(i) for i in range(count)), **{n: _Keyword(n) for n in names})
        plan = []
        for name, value in bound.arguments.items():
            if isinstance(value, _Positional):
                plan.append((name, "p", value.index))
            elif isinstance(value, _Keyword):
                plan.append((name, "k", value.name))
            elif isinstance(value, tuple):
                plan.append((name, "vp", tuple(v.index for v in value)))
            else:
                plan.append((name, "vk", tuple(sorted(v.name for v in value.values()))))
        return tuple(plan)
