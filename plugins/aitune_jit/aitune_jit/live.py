"""Live calls, served eagerly while tuning runs: the winner must match eager on them before it serves.

The tuning data are the calls recorded before tuning started; these come after, so a
winner that only fits what it was tuned on is caught. The first few calls after
tuning starts are kept (inputs copied before the forward, which may change them, and
eager's outputs as served); then the hooks go, and serving pays nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.metadata.copies import owned_copy
from aitune_core.module.recorder import call_key
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.validation.compare import compare_outputs


@attrs.frozen
class LiveSample:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: Any


class LiveSamples:
    """The first ``keep`` calls of ``inner`` from now on, with their outputs.

    ``inner`` is the wrapper of a module that is being tuned: it runs the module eagerly
    until the tuning's routes are installed, so what its hooks see are eager's outputs.
    """

    def __init__(self, inner: nn.Module, keep: int) -> None:
        self._keep = keep
        self._samples: list[LiveSample] = []
        self._arrived = threading.Condition()
        self._closed = False
        pending = threading.local()

        # Closures, not bound methods: a backend that deep-copies the module copies its hooks,
        # and functions are copied as themselves. Calls of such a copy are not eager's: skipped.
        def before(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if module is inner:
                pending.__dict__.setdefault("stack", []).append((owned_copy(args), owned_copy(kwargs)))

        def after(module: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], outputs: Any) -> None:
            stack = pending.__dict__.get("stack")
            if module is inner and stack:
                args, kwargs = stack.pop()
                self._keep_sample(args, kwargs, owned_copy(outputs))

        self._handles = [
            inner.register_forward_pre_hook(before, with_kwargs=True),
            inner.register_forward_hook(after, with_kwargs=True),
        ]

    def _keep_sample(self, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any) -> None:
        with self._arrived:
            if len(self._samples) < self._keep:
                self._samples.append(LiveSample(args, kwargs, outputs))
                self._arrived.notify_all()
            if len(self._samples) >= self._keep:
                self.remove_hooks()

    def remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def wait(self, timeout: float | None = None) -> list[LiveSample]:
        """The samples kept so far, after waiting (up to ``timeout``) for at least one."""
        with self._arrived:
            self._arrived.wait_for(lambda: bool(self._samples) or self._closed, timeout)
            return list(self._samples)

    def close(self) -> None:
        """Stop collecting, and wake a :meth:`wait`: nothing more will come."""
        self.remove_hooks()
        with self._arrived:
            self._closed = True
            self._arrived.notify_all()


@attrs.frozen
class LiveCheck:
    checked: int
    problem: str | None = None


def check_routes(
    signature: ForwardSignature,
    routes: dict[Hashable, Route],
    samples: list[LiveSample],
    key_parts: Any,
    tolerances: Tolerances | None,
) -> LiveCheck:
    """Run each sample as the routes would serve it, and compare with eager's outputs.

    Samples the routes would send to eager (an unseen graph, a shape outside the tuned
    range, an eager batch range) are not checks of the winner and are not counted.
    """
    checked = 0
    for index, sample in enumerate(samples):
        arguments = signature.normalize(sample.args, sample.kwargs)
        route = routes.get(call_key(arguments, config.strict_mode, key_parts))
        if route is None or route.mismatch(arguments) is not None:
            continue
        call = route.pick(arguments) if route.lower_calls else route.call
        if call is RUN_EAGERLY:
            continue
        args, kwargs = signature.as_bound(sample.args, sample.kwargs, arguments)
        with torch.no_grad():
            outputs = call(*args, **kwargs)
        backend = _backend_of(route, call)
        allowed = backend.default_tolerances().merged(tolerances) if backend is not None else tolerances
        comparison = compare_outputs(outputs, sample.outputs, allowed or Tolerances())
        checked += 1
        if comparison.problem is not None:
            name = type(backend).__name__ if backend is not None else "the winner"
            return LiveCheck(checked, f"{name} on live call {index + 1}: {comparison.problem}")
    return LiveCheck(checked)


def _backend_of(route: Route, call: Any) -> Any:
    """The backend whose callable ``call`` is (the route keeps callables and backends side by side)."""
    for (_, lower_call), (_, backend) in zip(route.lower_calls, route.lower, strict=True):
        if lower_call is call and backend is not None:
            return backend
    return route.backend
