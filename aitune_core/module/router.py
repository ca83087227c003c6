"""Routing tuned calls: a dict lookup by graph key, then a shape check, then the backend.

Everything that can be worked out ahead of time is, when the route is made: which
arguments hold tensors, the size range of every axis, and whether batch axes must be
checked for a common batch size. A call then costs the key, one lookup and a few
integer comparisons; ``model(x)``, the commonest call, not even the key (see
:mod:`aitune_core.module.lane`).

Compiled backends may not check their own bounds (an AOT Inductor package built for
batch <= 8 happily runs batch 2000), so a shape outside the tuned range never reaches
the backend: it goes to eager, or raises when ``config.fallback == "raise"``.

Nor do they follow the module once built: see :mod:`aitune_core.module.staleness` for
when calls go to eager because the module changed.

A graph may be served by more than one backend, each over a range of batch sizes
(ONNX Runtime for batch 1-4, AOT Inductor above, say), with eager serving the ranges
where nothing beat it. The route then reads the call's batch size and picks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.backends.tolerances import Tolerances
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.metadata.locator import Locator, get_many

if TYPE_CHECKING:
    import torch

_MAX_REPORTED_UNSEEN = 16


class _TensorCheck:
    """One input tensor's tuned size ranges, arranged for a check that costs little per call.

    Most graphs vary only in their leading axes (batch, then sequence length): their
    fixed trailing sizes are compared as one tuple, and only the leading ones are
    checked against their ranges. Other graphs check every axis.
    """

    __slots__ = ("batch_multipliers", "head", "highs", "locator", "lows", "root", "tail")

    def __init__(self, locator: Locator, lows: list[int], highs: list[int], multipliers: dict[int, int]) -> None:
        self.locator = locator
        self.root = locator.root if not locator.keys else None
        self.lows = tuple(lows)
        self.highs = tuple(highs)
        self.batch_multipliers = tuple(multipliers.items())
        ranged = [axis for axis, (low, high) in enumerate(zip(lows, highs, strict=True)) if low != high]
        leading = ranged == list(range(len(ranged)))
        self.head: tuple[tuple[int, int], ...] | None = (
            tuple(zip(lows[: len(ranged)], highs[: len(ranged)], strict=True)) if leading else None
        )
        self.tail = tuple(lows[len(ranged) :]) if leading else ()

    def fits(self, shape: torch.Size) -> bool:
        """Whether every size of ``shape`` (of the tuned rank: the graph key holds it) is in its range."""
        head = self.head
        if head is None:
            return all(low <= size <= high for size, low, high in zip(shape, self.lows, self.highs, strict=False))
        if shape[len(head) :] != self.tail:
            return False
        for size, (low, high) in zip(shape, head, strict=False):  # noqa: SIM110 (a loop costs less than all() here)
            if size < low or size > high:
                return False
        return True


def follows_weights(backend: Any) -> bool:
    """Whether ``backend`` runs the module's live parameters, so that new weights reach it.

    A backend says so with a ``reads_live_weights`` attribute. ``is_jit`` is not enough:
    Inductor JIT with ``freezing`` folds the weights into its code, and a JIT backend may
    run a transformed copy. Without the attribute only the eager backend, which calls the
    module itself, is taken to follow them.
    """
    declared = getattr(backend, "reads_live_weights", None)
    if declared is not None:
        return bool(declared)

    return isinstance(backend, TorchEagerBackend)


RUN_EAGERLY = object()
"""What :meth:`Route.pick` returns for a call that the original module serves."""


class Route:
    """A graph's backends, by batch range, and the checks a call must pass to use them.

    backend: serves every batch above the ``lower`` ranges (all of them without any).
    lower: ``(up_to, backend)`` pairs, ascending: batches up to ``up_to`` (and above
        the previous pair's) go to ``backend``, or to the original module where it is None.
    tolerances: what the strategy added to each backend's own tolerances when it validated
        them (:mod:`aitune_core.module.spot_check` compares with them); None when unknown.
    """

    __slots__ = (
        "backend",
        "batch_axis",
        "call",
        "check_batch",
        "checks",
        "dropped",
        "follows_weights",
        "graph",
        "lower",
        "lower_calls",
        "nested",
        "single",
        "tolerances",
    )

    def __init__(
        self,
        graph: GraphSpec,
        backend: Any,
        lower: Sequence[tuple[int, Any | None]] = (),
        tolerances: Tolerances | None = None,
    ) -> None:
        self.graph = graph
        self.backend = backend
        self.call = backend
        self.lower: tuple[tuple[int, Any | None], ...] = tuple(sorted(lower, key=lambda pair: pair[0]))
        self.lower_calls: tuple[tuple[int, Any], ...] = ()
        self.tolerances = tolerances
        self.dropped: tuple[Any, ...] = ()
        """Backends a spot check caught giving wrong answers: the original module serves their batches."""
        self.follows_weights = all(follows_weights(b) for b in self.backends)
        self.refresh()
        self.checks = [
            _TensorCheck(locator, spec.min_shape, spec.max_shape, spec.get_batch_axis_multipliers())
            for locator, spec in graph.input_spec.tensor_data
        ]
        # Inputs inside containers (a KV cache) are looked up together, sharing their paths.
        nested = any(check.root is None for check in self.checks)
        self.nested = [check.locator for check in self.checks] if nested else None
        # Where to read a call's batch size: the first batch axis, divided by its multiplier.
        self.batch_axis = next(
            ((check, axis, multiplier) for check in self.checks for axis, multiplier in check.batch_multipliers),
            None,
        )
        if self.batch_axis is None:
            self.lower, self.lower_calls = (), ()
        multipliers = [m for check in self.checks for _, m in check.batch_multipliers]
        # One batch axis with multiplier 1 needs no extra check: its range check is enough.
        self.check_batch = len(multipliers) > 1 or any(m != 1 for m in multipliers)
        # One tensor argument, nothing to compare it with: the common call, checked without loops.
        only = self.checks[0] if len(self.checks) == 1 else None
        self.single = only if only is not None and only.root is not None and not self.check_batch else None

    def refresh(self) -> None:
        """Call the backend's own callable directly, skipping its state check (about 1 us).

        Only valid while the backend is ACTIVE or DEPLOYED: the wrapper refreshes its
        routes whenever it activates them, and routes nothing while they are released.
        """
        self.call = self._call_of(self.backend)
        self.lower_calls = tuple((up_to, self._call_of(backend)) for up_to, backend in self.lower)

    def _call_of(self, backend: Any | None) -> Any:
        if backend is None or any(backend is dropped for dropped in self.dropped):
            return RUN_EAGERLY
        return _direct_call(backend)

    def drop(self, backend: Any) -> None:
        """Serve the batches ``backend`` served on the original module from now on, whatever reactivates it."""
        self.dropped = (*self.dropped, backend)
        self.refresh()

    @property
    def backends(self) -> list[Any]:
        """Every backend this route calls, the one above the ranges first."""
        found = [self.backend]
        for _, backend in self.lower:
            if backend is not None and all(backend is not seen for seen in found):
                found.append(backend)
        return found

    @property
    def eager_up_to(self) -> int | None:
        """The largest batch that the original module serves, when the lowest range is eager's."""
        if self.lower and self.lower[0][1] is None:
            return self.lower[0][0]
        return None

    def ranges(self, low: int, high: int) -> list[tuple[int, int, Any | None]]:
        """``(first, last, backend)`` for each batch range within ``low..high``; None is eager."""
        found, start = [], low
        for up_to, backend in self.lower:
            if start > high:
                break
            if up_to >= start:
                found.append((start, min(up_to, high), backend))
                start = up_to + 1
        if start <= high:
            found.append((start, high, self.backend))
        return found

    def pick(self, arguments: dict[str, Any]) -> Any:
        """The callable for this call's batch size: a lower range's, :data:`RUN_EAGERLY`, or the main one."""
        if not self.lower_calls or self.batch_axis is None:
            return self.call
        check, axis, multiplier = self.batch_axis
        tensor = arguments[check.root] if check.root is not None else check.locator.get(arguments)
        return self.call_at(tensor.shape[axis] // multiplier)

    def call_at(self, batch: int) -> Any:
        """The callable for batch size ``batch`` (of a route with lower ranges, see :meth:`pick`)."""
        for up_to, call in self.lower_calls:
            if batch <= up_to:
                return call
        return self.call

    def without_eager_ranges(self) -> None:
        """Serve the eager ranges with the next backend up: the original module can no longer run."""
        self.dropped = ()  # nor serve a dropped backend's batches: the backends are all there is
        kept: list[tuple[int, Any | None]] = []
        for index, (up_to, backend) in enumerate(self.lower):
            if backend is None:
                following = next((b for _, b in self.lower[index + 1 :] if b is not None), self.backend)
                backend = following
            kept.append((up_to, backend))
        self.lower = tuple(kept)
        self.refresh()

    def _tensors(self, arguments: dict[str, Any]) -> list[Any]:
        """The call's input tensors, in the order of ``checks``."""
        if self.nested is None:
            return [arguments[check.root] for check in self.checks if check.root is not None]  # every one has a root
        return get_many(arguments, self.nested)

    def takes_grad(self, arguments: dict[str, Any]) -> bool:
        """Whether an input tensor requires grad (asked only while grad mode is on)."""
        return any(tensor.requires_grad for tensor in self._tensors(arguments))

    def mismatch(self, arguments: dict[str, Any]) -> str | None:
        """None when the call fits the tuned shapes, else why it does not."""
        single = self.single
        if single is not None:
            shape = arguments[single.root].shape  # type: ignore[index]
            return None if single.fits(shape) else _outside(single, shape)
        batch: int | None = None
        for check, tensor in zip(self.checks, self._tensors(arguments), strict=True):
            shape = tensor.shape
            if not check.fits(shape):
                return _outside(check, shape)
            if self.check_batch:
                for axis, multiplier in check.batch_multipliers:
                    implied, remainder = divmod(shape[axis], multiplier)
                    if remainder or (batch is not None and implied != batch):
                        return (
                            f"`{check.locator.display_path}` axis {axis} does not match the batch of the other inputs"
                        )
                    batch = implied
        return None


def _outside(check: _TensorCheck, shape: torch.Size) -> str:
    return (
        f"`{check.locator.display_path}` has shape {list(shape)}, outside the tuned range "
        f"{list(check.lows)}..{list(check.highs)}"
    )


def _direct_call(backend: Any) -> Any:
    callable_ = getattr(backend, "inference_callable", None)
    return callable_() if callable_ is not None else backend


class UnseenCalls:
    """Remembers which unseen graph keys were already warned about, up to a bound."""

    def __init__(self) -> None:
        self._warned: set[Hashable] = set()
        self.count = 0

    def first_time(self, key: Hashable) -> bool:
        self.count += 1
        if key in self._warned or len(self._warned) >= _MAX_REPORTED_UNSEEN:
            return False
        self._warned.add(key)
        return True
