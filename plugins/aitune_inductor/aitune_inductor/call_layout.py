"""The argument layout a package was exported with, and rearranging other calls into it.

Graph keys treat ``m(x, mask)`` and ``m(x=x, mask=mask)`` as one graph, so a compiled
package may be called either way. An exported program, though, flattens its inputs by
the exact positional/keyword split of the example call. The layout remembers that
split and the forward's parameter order (it is saved with the checkpoint, so a
restored package can rearrange calls without the module's source at hand).
"""

from __future__ import annotations

import inspect
from typing import Any

import attrs

from aitune_core.plugin_api import ForwardSignature

_NAMED = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


@attrs.frozen
class CallLayout:
    """parameters: the forward's named parameters, in order; positional: how many of them the
    example call passed by position; keywords: the names it passed by keyword."""

    parameters: tuple[str, ...]
    positional: int
    keywords: frozenset[str]

    @classmethod
    def of_call(cls, signature: ForwardSignature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallLayout:
        names: tuple[str, ...] = ()
        if signature.signature is not None:
            names = tuple(name for name, param in signature.signature.parameters.items() if param.kind in _NAMED)
        return cls(names, len(args), frozenset(kwargs))

    def matches(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return len(args) == self.positional and kwargs.keys() == self.keywords

    def arrange(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The same call, split into positional and keyword arguments as the export was."""
        if not self.parameters or len(args) > len(self.parameters):
            return args, kwargs  # *args forwards, or nothing known: pass through unchanged
        values = dict(zip(self.parameters, args, strict=False))
        values.update(kwargs)
        try:
            positional = tuple(values.pop(name) for name in self.parameters[: self.positional])
        except KeyError as missing:
            raise TypeError(f"call is missing argument {missing} that the compiled package takes") from None
        return positional, values

    def to_dict(self) -> dict[str, Any]:
        return {"parameters": list(self.parameters), "positional": self.positional, "keywords": sorted(self.keywords)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallLayout:
        return cls(tuple(data["parameters"]), int(data["positional"]), frozenset(data["keywords"]))
