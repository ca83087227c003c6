"""A CPU copy of a module's parameters and buffers: what undoes a step's writes to them.

A snapshot (:mod:`aitune_core.guard.snapshot`) tells that a weight was written, not
what it held before, so putting it back needs the values. The guard makes one copy
per module per ``tune()``, at the module's first candidate step (a dry run makes
none), shares it between the module's graphs, and drops it when the module is tuned.
It costs one copy of the weights in host memory and the time to make it (about what
``state_dict()`` to CPU costs). Values are put back as they were when it was made.

The copy also catches writes that no snapshot sees: through ``.data``
(``weight.data.mul_(2)``), which moves neither the version counter nor the storage.
:meth:`WeightCopy.values_differ` compares bit by bit (NaNs equal themselves, ``0.0``
and ``-0.0`` differ), one tensor at a time, on the tensor's own device; after each
step, that reads every weight once (a few ms per 10 MB on one CPU core).
"""

from __future__ import annotations

import time

import torch

from aitune_core.guard.snapshot import VERSION, Fingerprint, ModuleSnapshot, TrackedTensor, fingerprint, same_storage

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class _Entry:
    """One tensor's original storage (an alias that keeps it alive) and a CPU copy of its values."""

    __slots__ = ("alias", "fingerprint", "values")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.alias = tensor.detach()
        self.fingerprint: Fingerprint = fingerprint(tensor)
        self.values: torch.Tensor | None = None
        if tensor.device.type != "meta":
            try:
                self.values = self.alias.to("cpu", copy=True)
            except (RuntimeError, NotImplementedError, TypeError):  # a tensor subclass that cannot be copied
                self.values = None


class WeightCopy:
    """The values of every parameter and buffer of a module, as they were when it was made."""

    def __init__(self, snapshot: ModuleSnapshot) -> None:
        start = time.perf_counter()
        self._entries = {key: _Entry(tracked.tensor) for key, tracked in snapshot.tensors.items()}
        self.duration_s = time.perf_counter() - start

    @property
    def nbytes(self) -> int:
        return sum(e.values.numel() * e.values.element_size() for e in self._entries.values() if e.values is not None)

    def values_differ(self, tracked: TrackedTensor) -> bool:
        """Whether ``tracked`` holds other values than when the copy was made, though nothing shows it.

        Only tensors that look exactly as they did then are compared: one whose version
        counter moved since (a module that updates its own buffers when eager runs) is
        left to the snapshot, which attributes such writes to the step that made them.
        """
        entry = self._entries.get(id(tracked.tensor))
        if entry is None or entry.values is None or tracked.fingerprint != entry.fingerprint:
            return False
        try:
            return not same_bits(tracked.tensor.detach(), entry.values)
        except (RuntimeError, NotImplementedError, TypeError):
            return False

    def restore(self, tensor: torch.Tensor) -> bool:
        """Put ``tensor``'s original storage and values back; False when this copy cannot."""
        entry = self._entries.get(id(tensor))
        if entry is None:
            return False
        if not same_storage(fingerprint(tensor), entry.fingerprint):  # storage swapped: point it at its own again
            tensor.data = entry.alias
        if entry.values is None:  # nothing to copy back: restored only if its storage was not written
            return fingerprint(entry.alias)[VERSION] == entry.fingerprint[VERSION]
        try:
            with torch.no_grad():
                tensor.copy_(entry.values)
        except RuntimeError:
            return False
        entry.fingerprint = fingerprint(tensor)  # it holds the copied values again: compare it from here on
        return True


def same_bits(tensor: torch.Tensor, values: torch.Tensor) -> bool:
    """``tensor`` equals ``values`` bit for bit; ``values`` is moved to ``tensor``'s device for the comparison."""
    if tensor.shape != values.shape or tensor.dtype != values.dtype:
        return False
    if values.device != tensor.device:
        values = values.to(tensor.device)
    return torch.equal(_as_bits(tensor), _as_bits(values))


def _as_bits(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.dtype is torch.bool or not (tensor.is_floating_point() or tensor.is_complex()):
        return tensor
    return tensor.view(_BITS[tensor.element_size()])
