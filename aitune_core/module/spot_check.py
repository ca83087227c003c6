"""Spot checks: one routed call in ``config.spot_check_every`` is also run on the original module.

Validation passes a backend once, on the tuning data. One that goes wrong later (a
runtime that drifts after some calls, a cache that fills with stale entries) would then
serve wrong answers for good. With ``config.spot_check_every = N``, one routed call in N
of each wrapped module is checked: the original module runs the same inputs under
``no_grad``, and the outputs are compared as validation compares them, with the
tolerances the route was validated with. The caller gets the backend's answer either
way. A mismatch drops the backend from its route (:meth:`~aitune_core.module.router.Route.drop`):
the batch sizes it served run eagerly from then on, and a warning names the graph, the
backend and the difference.

Where the check runs: in the calling thread, right after the backend has answered and
before the call returns. A thread of its own was tried and measured, and lost: under the
interpreter lock the check's Python (the eager forward's, the comparison's) does not run
beside the serving thread but in turns with it, so instead of the checked call waiting
a known time, whichever calls overlap the check stalled, by up to milliseconds on a busy
machine (docs/architecture.md has both measurements). Here the checked call pays for the
check, and no other call does. The eager run also sees exactly the calling thread's state
(inference mode, CUDA stream and device, default device, dispatch modes), which another
thread would not. It runs on a copy of the inputs taken before the backend runs, since a
forward may write to them.

Not checked: calls under autocast (the next call is checked instead; validation compared
without autocast, and eager would compute at other precisions), lossy backends whose
validation tolerances are unknown (a checkpoint's), and modules whose weights were
released, which have no original module to run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from aitune_core.config import config
from aitune_core.log import get_logger
from aitune_core.metadata.copies import owned_copy
from aitune_core.module.router import Route
from aitune_core.validation.compare import compare_outputs, quickly_close


class SpotChecks:
    """One wrapped module's routed calls since its last check."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


def spot_checked(module: Any, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``call(*args, **kwargs)``, a routed call of ``module``; when one is due, checked against the original module."""
    checks: SpotChecks = module._spot_checks
    checks.calls += 1
    if checks.calls < (config.spot_check_every or 1) or _under_autocast():
        return call(*args, **kwargs)
    checks.calls = 0
    found = _route_of(module, call)
    if found is None:
        return call(*args, **kwargs)
    inputs = owned_copy((args, kwargs))
    outputs = call(*args, **kwargs)
    _check(module, *found, inputs, outputs)
    return outputs


def _under_autocast() -> bool:
    return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")


def _route_of(module: Any, call: Callable[..., Any]) -> tuple[Route, Any] | None:
    """The route and backend that ``call`` belongs to, or None when it is not to be checked."""
    if module.__dict__.get("_weights_released"):
        return None
    for route in module.__dict__["_routes"].values():
        if route.call is call:
            backend = route.backend
        else:
            pairs = zip(route.lower_calls, route.lower, strict=True)
            backend = next((lower for (_, lower_call), (_, lower) in pairs if lower_call is call), None)
            if backend is None:
                continue
        if route.tolerances is None and getattr(backend, "lossy", False):
            return None  # judged against tolerances nobody knows any more, it could only be dropped wrongly
        return route, backend
    return None


def _check(module: Any, route: Route, backend: Any, inputs: tuple[Any, Any], outputs: Any) -> None:
    """Compare ``outputs`` with the original module's on ``inputs``; drop ``backend`` from ``route`` if they differ."""
    args, kwargs = inputs
    try:
        with torch.no_grad():
            expected = module.module(*args, **kwargs)
    except Exception as error:  # not the backend's fault: nothing to compare with, so nothing is dropped
        _log(module, route, backend).warning(
            "spot check skipped: the original module raised", error=f"{type(error).__name__}: {error}"
        )
        return
    tolerances = backend.default_tolerances().merged(route.tolerances)
    if quickly_close(outputs, expected, tolerances):
        return
    problem = compare_outputs(outputs, expected, tolerances).problem
    if problem is None:
        return
    route.drop(backend)
    _log(module, route, backend).warning(
        "spot check failed: the backend is dropped and the original module serves its calls",
        error=problem,
        hint="re-tune the module to build its backends again; report the difference to the backend's authors",
    )


def _log(module: Any, route: Route, backend: Any) -> Any:
    return get_logger(module=module.name, graph=route.graph.name, backend=backend.describe())
