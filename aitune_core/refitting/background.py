"""Refits in the background: ``config.on_weight_change = "refit"``.

A tuned module whose weights changed under backends that hold their own copy sends
every call to the original module and asks for a refit (:func:`request`, through
``extensions.request_refit``: the module layer cannot import this one). One thread per
module then refits its routes (:func:`~aitune_core.refitting.module_refit.refit_module`,
background way), starting again whenever the weights change under it, and installs
them once they pass. Asking again while it runs costs a lock and a flag, so every
bypassed call may ask.

:func:`wait` is how a caller knows it is over: it starts the refit that is due (when
the weights changed and no call asked yet) and blocks until no refit of the module
runs. ``aitune_core.refit`` stops the background one first (:func:`paused`), so the
two never work on the same routes at once.

A refit that raises (a bug, not a backend that fails: those end in the report) is
logged with its traceback, and the module is not refitted in the background again
until its routes change (a tune, a load, ``aitune_core.refit``), rather than once per
call. One whose weights changed during every attempt, many in a row, stops until the
user's code writes them again (a hook fires): weights that change with no hook firing
are the module's own doing, and trying again would never end.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator

from aitune_core.config import config
from aitune_core.log import get_logger
from aitune_core.module.wrapper import Module
from aitune_core.refitting.module_refit import WeightsKeptChangingError, refit_module, watch_of
from aitune_core.refitting.report import RefitReport
from aitune_core.reporting.console import emit_block


class _Slot:
    """One module's background refit: whether it runs, what it last reported, and the lock of its routes."""

    def __init__(self) -> None:
        self.routes = threading.Lock()
        """Held by whoever refits the module's routes, here or in ``aitune_core.refit``."""
        self.state = threading.Condition()
        self.running = False
        self.stop = False
        self.last: RefitReport | None = None
        self.failed_generation: int | None = None
        self.gave_up_at: int | None = None
        """The watch's count of the user's writes when a refit gave up on weights that kept changing."""


_slots: weakref.WeakKeyDictionary[Module, _Slot] = weakref.WeakKeyDictionary()
_slots_lock = threading.Lock()


def slot_of(wrapper: Module) -> _Slot:
    with _slots_lock:
        slot = _slots.get(wrapper)
        if slot is None:
            slot = _slots[wrapper] = _Slot()
        return slot


def request(wrapper: Module) -> None:
    """Refit ``wrapper``'s routes in the background unless that is already under way (or failed for these routes)."""
    slot = slot_of(wrapper)
    watch = watch_of(wrapper)
    with slot.state:
        if slot.running or slot.failed_generation == watch.generation or slot.gave_up_at == watch.touches:
            return
        slot.running = True
    thread = threading.Thread(
        target=_work, args=(weakref.ref(wrapper), slot), name=f"aitune-refit-{wrapper.name}", daemon=True
    )
    thread.start()


def _work(reference: weakref.ref[Module], slot: _Slot) -> None:
    report: RefitReport | None = None
    wrapper = reference()
    generation = None
    try:
        if wrapper is None:
            return
        generation = watch_of(wrapper).generation
        with slot.routes:
            if not slot.stop:
                report = refit_module(wrapper, background=True, stopping=lambda: slot.stop)
        if report is not None:
            emit_block("Refit summary", report.summary(), module=wrapper.name)
    except WeightsKeptChangingError as error:
        get_logger(module=getattr(wrapper, "name", "?")).warning("background refit stopped", reason=str(error))
        slot.gave_up_at = error.touches  # until the user's code writes the weights again
    except Exception:
        get_logger(module=getattr(wrapper, "name", "?")).exception(
            "background refit failed; the original module serves until aitune_core.refit(model) or a new tune"
        )
        slot.failed_generation = generation
    finally:
        with slot.state:
            slot.running = False
            if report is not None:
                slot.last = report
            slot.state.notify_all()


def wait(wrapper: Module, timeout: float | None = None) -> RefitReport | None:
    """Block until no background refit of ``wrapper`` runs, starting the one that is due; its last report.

    Raises TimeoutError when ``timeout`` seconds pass first.
    """
    slot = slot_of(wrapper)
    due = config.on_weight_change == "refit" and not _follows_every_weight(wrapper)
    if due and watch_of(wrapper).weight_change() is not None:
        request(wrapper)
    with slot.state:
        if not slot.state.wait_for(lambda: not slot.running, timeout):
            raise TimeoutError(
                f"the background refit of aitune module `{wrapper.name}` was still running after {timeout} s"
            )
        return slot.last


def _follows_every_weight(wrapper: Module) -> bool:
    return all(route.follows_weights for route in wrapper.routes.values())


@contextlib.contextmanager
def paused(wrapper: Module) -> Iterator[None]:
    """Hold ``wrapper``'s routes for a refit made now: a background one stops after its current attempt first."""
    slot = slot_of(wrapper)
    slot.stop = True
    try:
        with slot.routes:
            yield
    finally:
        slot.stop = False
        slot.failed_generation = slot.gave_up_at = None
