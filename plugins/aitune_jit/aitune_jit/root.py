"""Taking the calls of the user's model object itself, which no parent holds and no code of ours can rebind.

``ait.Module`` replaces a module in its parent; the model a script holds in a local
variable has no parent. So the model keeps its identity and its class is swapped for a
subclass made for this one object, whose ``__call__`` goes to a wrapper (when the model
itself is tuned) and, while a tuning runs, marks the call in flight
(:data:`~aitune_jit.serving.SERVING_CALLS`) and passes it through
:data:`~aitune_jit.trace_gate.TRACE_GATE`. The wrapper wraps a *twin*: an instance of the original class sharing
the model's ``__dict__`` (parameters, buffers, submodules, flags, hooks), so the eager
path runs the original forward on exactly the model's state, and ``model.eval()`` or
``model.to()`` reach both.

The subclass keeps the class's name, so ``isinstance``, ``repr`` and ``type(model).__name__``
look as before; copies and pickles of the model are made of the original class and
are plain modules. :func:`unroute` puts the original class back.
"""

from __future__ import annotations

import copyreg
from typing import Any

from torch import nn

from aitune_core.module.wrapper import MODULE_REGISTRY, Module
from aitune_jit.serving import SERVING_CALLS
from aitune_jit.trace_gate import TRACE_GATE

_ORIGINAL = "_aitune_jit_original_class"


def route_root(model: nn.Module, name: str | None, strategy: Any = None) -> Module | None:
    """Swap ``model``'s class; with a ``name``, its calls go to the returned wrapper from now on."""
    cls = type(model)
    if getattr(cls, _ORIGINAL, None) is not None:
        raise ValueError(f"{cls.__name__} is already routed by the JIT")
    wrapper: Module | None = None
    serve: Any = lambda *args, **kwargs: cls.__call__(model, *args, **kwargs)  # noqa: E731
    if name is not None:
        twin = object.__new__(cls)
        object.__setattr__(twin, "__dict__", model.__dict__)
        wrapper = Module(twin, name, strategy=strategy)
        serve = wrapper
    target, gate, calls = model, TRACE_GATE, SERVING_CALLS

    def gated(*args: Any, **kwargs: Any) -> Any:
        if gate.active:
            with gate.serving():
                return serve(*args, **kwargs)
        return serve(*args, **kwargs)

    def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if self is not target:
            return cls.__call__(self, *args, **kwargs)  # a copy made of this object: not routed
        if calls.watching:  # a tuning runs (the trace gate is only ever active then)
            return calls.serve(gated, args, kwargs)
        return serve(*args, **kwargs)

    def __reduce_ex__(self: nn.Module, protocol: Any) -> Any:
        # Copies and pickles are of the original class: the routing belongs to this object only.
        # (``copyreg.__newobj__`` insists on the object's own class, so the stdlib's older
        # constructor is named instead: nothing of aitune is needed to load the pickle.)
        reduced = cls.__reduce_ex__(self, protocol)
        if isinstance(reduced, tuple) and len(reduced) > 1 and reduced[1] and reduced[1][0] is type(self):
            reduced = (copyreg._reconstructor, (cls, object, None), *reduced[2:])  # type: ignore[attr-defined]
        return reduced

    routed = type(
        cls.__name__,
        (cls,),
        {
            "__call__": __call__,
            "__reduce_ex__": __reduce_ex__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            _ORIGINAL: cls,
        },
    )
    model.__class__ = routed
    return wrapper


def unroute(model: nn.Module, wrapper: Module | None = None) -> None:
    """Give ``model`` its class back and release the wrapper's backends."""
    original = type(model).__dict__.get(_ORIGINAL)
    if original is not None:
        model.__class__ = original
    if wrapper is not None:
        wrapper.deactivate()
        MODULE_REGISTRY.remove(wrapper)
