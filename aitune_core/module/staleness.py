"""Noticing that a tuned module changed under the backends built for it.

Most backends hold what the module was when tuning built them: an AOT Inductor package
or an ONNX Runtime session carries its own copy of the weights, was traced in eval
mode, and returns outputs without gradients. After ``load_state_dict``, ``.train()`` or
a call whose inputs require grad they would answer for a module that no longer exists,
so such calls go to the original module, with one warning per wrapper and kind of
change. Backends that run the live module (:attr:`Route.follows_weights
<aitune_core.module.router.Route>`) keep serving through weight changes; mode and grad
changes go to eager for every backend. What happens next after new weights is
``config.on_weight_change``'s choice (:mod:`aitune_core.module.new_weights`): by default
the routes are refitted in the background and serve again once validated.

What is seen when, for a module in the TUNED state:

* every routed call, O(1): the wrapped module's own ``training`` flag; whether grad
  mode is on and, only then, whether an input requires grad (in the router); and an
  alarm flag that these raise: ``load_state_dict`` on the wrapper, a parent or any
  submodule present at tuning (post hooks), a step of any ``torch.optim`` optimizer
  holding one of its parameters (torch's global step hook,
  :mod:`aitune_core.module.optimizer_steps`), ``.to()``/``.half()``/``.cuda()`` through
  the wrapper or a parent (``_apply``), ``train()``/``eval()`` through the wrapper,
  assigning a parameter, buffer or submodule through the wrapper, and a tuning session
  opening anywhere in the process;
* on the first call after a hook fired, and on every :data:`CHECK_EVERY`-th call
  otherwise, O(parameters + buffers + submodules), about 0.3 us per tensor: every
  submodule's ``training`` flag, which parameter, buffer and submodule objects each
  submodule holds, and every tensor's version counter and storage address. So an
  optimizer step is seen by the first call that starts after it returns. Other
  in-place writes made without a hook (``weight.mul_(2)`` under ``no_grad``, an
  optimizer that is not a ``torch.optim.Optimizer``), ``.to()`` called on the wrapped
  module or a submodule directly, and submodules added or replaced there are seen by
  the periodic check: until then at most ``CHECK_EVERY - 1`` calls are served by the
  old backends. A call made from another thread while a step is writing may still be
  answered by them: the step hook fires once the step has returned;
* never: writes through ``.data`` (``weight.data.copy_(new)``), which move neither
  the version counter nor the storage; in-place writes to inference tensors, which
  have no version counter; and writes that a kernel makes without moving the counter
  (BatchNorm's running statistics in training mode: such calls are seen by the mode
  check, and ``num_batches_tracked``, which does move, marks the weights changed after
  ``.eval()``). Call ``aitune_core.refit(model)`` (or re-run ``tune``, or load a
  checkpoint) after such edits.

Mode and grad changes end when they are undone (``.eval()`` again, inputs without
grad): the calls after that are routed again. Weight changes last until the routes are
refitted (:meth:`Watch.reset` with the weights they were refitted for), the module is
tuned again or a checkpoint is loaded into it.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from aitune_core.guard.snapshot import storage_of, version_of
from aitune_core.module.optimizer_steps import follow_optimizer_steps

CHECK_EVERY = 64
"""Routed calls between two full checks when no hook has fired."""

_MAX_NAMED = 4

WEIGHTS_HINT = (
    "call aitune_core.refit(model) to take them into the tuned backends, or re-run aitune_core.tune, or load a "
    "checkpoint, to tune for the new weights"
)
MODE_HINT = "call .eval() on the module to route to the tuned backends again, or tune the module in this mode"
GRAD_HINT = (
    "call it under torch.no_grad() or torch.inference_mode(), or pass inputs that do not require grad, "
    "to route to the tuned backends again"
)


class Change:
    """Why a routed call went to the original module instead of its tuned backend."""

    __slots__ = ("detail", "hint", "kind")

    WEIGHTS = "weights"
    MODE = "mode"
    GRAD = "grad"

    def __init__(self, kind: str, detail: str, hint: str) -> None:
        self.kind = kind
        self.detail = detail
        self.hint = hint

    def __repr__(self) -> str:
        return f"Change({self.kind!r}, {self.detail!r})"


GRAD_CHANGE = Change(
    Change.GRAD,
    "an input requires grad and grad mode is on; tuned backends return outputs without gradients",
    GRAD_HINT,
)


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMED])
    return f"{shown} and {len(names) - _MAX_NAMED} more" if len(names) > _MAX_NAMED else shown


class _Touch:
    """A ``load_state_dict`` post hook that raises a watch's alarm.

    It holds the watch weakly, so hooks left on the user's modules keep nothing alive;
    copies and pickles of the module get a hook that does nothing, since they are not
    what the backends were built from.
    """

    __slots__ = ("_watch",)

    def __init__(self, watch: Watch | None) -> None:
        self._watch = weakref.ref(watch) if watch is not None else None

    def __call__(self, module: nn.Module, incompatible_keys: Any) -> None:
        watch = self._watch() if self._watch is not None else None
        if watch is not None:
            watch.touch()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Touch, (None,))


class Baseline:
    """The module as its routes were built for it: objects, versions, storage and modes.

    Checking against it is what the periodic check costs (about 0.3 us per tensor), so it
    keeps each submodule's dicts of parameters, buffers and children rather than reading
    them through the modules again, and compares flat lists of integers.
    """

    def __init__(self, root: nn.Module) -> None:
        named = list(root.named_modules(remove_duplicate=True))
        self.paths = [path or "<module>" for path, _ in named]
        self.modules = [module for _, module in named]
        self.modes = _modes(self.modules)
        owned = [
            (path, holder)
            for path, module in named
            for holder in (module._parameters, module._buffers, module._modules)
        ]
        self.holders: list[dict[str, Any]] = [holder for _, holder in owned]
        self.sizes = list(map(len, self.holders))
        self.filled = [holder for holder in self.holders if holder]
        self.ids = self._ids()
        self.slots = [f"{path}.{key}" if path else key for path, holder in owned for key in holder]
        tensors: dict[int, tuple[str, torch.Tensor]] = {}
        for path, module in named:
            for key, tensor in itertools.chain(module._parameters.items(), module._buffers.items()):
                if tensor is not None and id(tensor) not in tensors:
                    tensors[id(tensor)] = (f"{path}.{key}" if path else key, tensor)
        # The version and storage parts of the guard's fingerprint, read below without its checks.
        versioned = [(name, t) for name, t in tensors.values() if version_of(t) is not None]
        pointed = [(name, t) for name, t in tensors.values() if storage_of(t) is not None]
        self.versioned_names = [name for name, _ in versioned]
        self.versioned = [t for _, t in versioned]
        self.pointed_names = [name for name, _ in pointed]
        self.pointed = [t for _, t in pointed]
        self.versions = list(map(_VERSION, self.versioned))
        self.pointers = list(map(_DATA_PTR, self.pointed))
        self.tensor_ids = frozenset(tensors)

    def _ids(self) -> list[int]:
        return [id(value) for holder in self.filled for value in holder.values()]

    def weight_change(self) -> Change | None:
        """What changed in the parameters, buffers and submodules since the baseline, if anything."""
        if list(map(len, self.holders)) != self.sizes:
            return _weights_change("parameters, buffers or submodules were added or removed")
        ids = self._ids()
        if ids != self.ids:
            return _weights_change(f"replaced: {_differing(self.slots, ids, self.ids)}")
        versions = list(map(_VERSION, self.versioned))
        if versions != self.versions:
            changed = _differing(self.versioned_names, versions, self.versions)
            return _weights_change(
                f"changed in place: {changed}; load_state_dict, an optimizer step or another in-place write"
            )
        pointers = list(map(_DATA_PTR, self.pointed))
        if pointers != self.pointers:
            moved = _differing(self.pointed_names, pointers, self.pointers)
            return _weights_change(f"moved to new storage: {moved}; .to(), .half() or an assignment to .data")
        return None

    def mode_change(self) -> Change | None:
        """Submodules whose training flag differs from the baseline, if any."""
        modes = _modes(self.modules)
        if modes == self.modes:
            return None
        return _mode_change(f"submodules changed mode since tuning: {_differing(self.paths, modes, self.modes)}")


_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _differing(names: list[str], now: list[Any], then: list[Any]) -> str:
    return _listed([name for name, a, b in zip(names, now, then, strict=True) if a != b])


def _modes(modules: list[nn.Module]) -> list[bool]:
    return [module.training for module in modules]


def _weights_change(detail: str) -> Change:
    return Change(Change.WEIGHTS, f"the module's weights changed ({detail})", WEIGHTS_HINT)


def _mode_change(detail: str) -> Change:
    return Change(Change.MODE, detail, MODE_HINT)


class Watch:
    """What the routed path of one wrapper consults to know its backends still fit the module.

    ``alarm`` and ``tick`` are read on every routed call: a raised alarm, or every
    :data:`CHECK_EVERY`-th tick, sends the call through :meth:`check`. Only hooks, sessions
    and :meth:`check` write ``alarm``; the routed path never does, so a hook firing in
    one thread is not lost to a call running in another.
    """

    __slots__ = (
        "__weakref__",
        "_baseline",
        "_hooked",
        "_modes",
        "_weights",
        "alarm",
        "dirty",
        "generation",
        "inner",
        "tick",
        "touches",
        "training",
        "warned",
    )

    def __init__(self, inner: nn.Module) -> None:
        self.inner = inner
        self.training = inner.training
        self.alarm = True
        self.dirty = False
        self.tick: Iterator[bool] = _ticks()
        self.warned: set[str] = set()
        self._baseline: Baseline | None = None
        self.generation = 0
        """Counts :meth:`reset` calls: which routes, and which weights, the watch was last set for."""
        self.touches = 0
        """Counts :meth:`touch` calls: a refit tells the user's own writes (which fire hooks) from a backend's."""
        self._weights: Change | None = None
        self._modes: Change | None = None
        self._hooked: weakref.WeakSet[nn.Module] = weakref.WeakSet()

    def hook(self) -> _Touch:
        """A ``load_state_dict`` post hook for a module whose loads concern this watch."""
        return _Touch(self)

    def touch(self) -> None:
        """Something may have changed the module: check it fully on the next routed call."""
        self.touches += 1
        self.dirty = True
        self.alarm = True

    def snapshot(self) -> Baseline:
        """The module as it is now: what a refit starts from, compared afterwards, then given to :meth:`reset`."""
        return Baseline(self.inner)

    def reset(self, baseline: Baseline | None = None) -> None:
        """Take the module as it is now (or as ``baseline`` found it) as what the routes were built for.

        With ``baseline``, taken before the routes were refitted, the first call after this
        checks everything against it, so that a change made since is not missed.
        """
        self._baseline = baseline if baseline is not None else Baseline(self.inner)
        self.training = self._baseline.modes[0]  # the root's flag: named_modules() yields it first
        self._weights = None
        self._modes = None
        self.warned = set()
        self.tick = _ticks()
        self.dirty = baseline is not None
        self.alarm = True
        self.generation += 1
        for module in self._baseline.modules:
            if module not in self._hooked:
                module.register_load_state_dict_post_hook(_Touch(self))
                self._hooked.add(module)
        follow_optimizer_steps(self, self._baseline.tensor_ids)

    def hold(self, change: Change) -> None:
        """Route no call to backends that hold their own weights until :meth:`reset` or :meth:`release`."""
        self._weights = change
        self.alarm = True

    def release(self) -> None:
        """End a :meth:`hold` without new routes: the next call looks at the module again."""
        self._weights = None
        self.touch()

    def weight_change(self) -> Change | None:
        """What changed in the weights since the routes were built for them, looked at now (a full check)."""
        return self._baseline.weight_change() if self._baseline is not None else None

    def mode_change(self) -> Change | None:
        """Whether the module is in another mode than the routes were built in, now."""
        baseline = self._baseline
        if baseline is None:
            return None
        if self.inner.training != self.training:
            return _mode_change(f"the module is in {'training' if self.inner.training else 'eval'} mode")
        return baseline.mode_change()

    def check(self, walk: bool) -> Change | None:
        """Why calls should not be routed now, if anything; ``walk``: a full check is due.

        Keeps the alarm raised while a change lasts, so every call comes back here and
        routing resumes on the first call after the change is undone.
        """
        baseline = self._baseline
        if baseline is None:
            return None
        if self.inner.training != self.training:
            self.touch()  # look at everything once the mode is back
            return _mode_change(
                f"the module is in {'training' if self.inner.training else 'eval'} mode; it was "
                f"tuned in {'training' if self.training else 'eval'} mode"
            )
        if self.dirty or walk:
            self.dirty = False
            if self._weights is None:
                found = baseline.weight_change()
                if self._baseline is baseline:  # not reset meanwhile (a refit installing its routes)
                    self._weights = found
            self._modes = baseline.mode_change()
        elif self._modes is not None:
            self._modes = baseline.mode_change()
            if self._modes is None:
                return self.check(walk=True)
        if self._modes is not None or self._weights is not None:
            self.alarm = True
        return self._modes or self._weights


def _ticks() -> Iterator[bool]:
    return itertools.cycle((False,) * (CHECK_EVERY - 1) + (True,))
