"""The user's model, built in each replica by the factory the user names (``pkg.mod:build``).

A checkpoint holds weights and tuned routes, not the model's code: loading needs a
freshly built model of the same structure. The user names a function that builds it
with no arguments; each replica imports and calls it, then loads the checkpoint into
what it returns.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from torch import nn

_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class FactoryError(ValueError):
    """The factory cannot be found, called, or does not build a model; the message says which and the fix."""


def check_reference(reference: str) -> tuple[str, str]:
    """``(module, attribute path)`` of ``pkg.mod:build``; FactoryError when it is not of that form."""
    if not _REFERENCE.match(reference):
        raise FactoryError(
            f"--factory must be MODULE:FUNCTION (e.g. mypkg.models:build), a function that builds the model "
            f"with no arguments; got {reference!r}"
        )
    module, attribute = reference.split(":", 1)
    return module, attribute


def resolve_factory(reference: str) -> Callable[[], object]:
    """The function ``pkg.mod:build`` names, imported but not called; FactoryError naming what is missing."""
    module_name, attribute = check_reference(reference)
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise FactoryError(
            f"cannot import {module_name!r} for the factory {reference}: {error}; it must be importable where "
            "the replicas run (installed, or on PYTHONPATH / the folder the server was started from)"
        ) from error
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise FactoryError(f"{module_name!r} has no {attribute!r} (the factory {reference})") from None
    if not callable(target):
        raise FactoryError(f"the factory {reference} is a {type(target).__name__}, not a function")
    return target


def build_model(reference: str) -> nn.Module:
    """Call the factory ``pkg.mod:build`` with no arguments, and check that it returned an ``nn.Module``."""
    model = resolve_factory(reference)()
    if not isinstance(model, nn.Module):
        raise FactoryError(
            f"the factory {reference} returned a {type(model).__name__}; it must return the torch.nn.Module "
            "that was tuned, freshly built (the checkpoint's weights replace its own)"
        )
    return model
