"""Optimizer steps, seen by the first call after them: torch's global step hook alarms the watches.

An optimizer writes the parameters in place, with no hook of the module firing, so
without this the staleness watch would see the step only at its periodic check, up to
``CHECK_EVERY - 1`` calls later, and those calls would be answered by backends that hold
the weights from before the step. torch calls global hooks before and after the
``step()`` of every ``torch.optim.Optimizer``
(``torch.optim.optimizer.register_optimizer_step_pre_hook`` and ``..._post_hook``); they are
registered once, when the first watch is set (a module is tuned or loaded), and touch each
watch whose module holds one of the parameters the optimizer steps. After the step, that
sends the next call through a full check; before it, a refit running at the same time
learns that the user's code is writing the weights (:mod:`aitune_core.refitting.guard`).

What a step costs on top: twice, a set of the ids of the optimizer's parameters and one
disjointness test per watch, about 0.1 us per parameter.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


class Touchable(Protocol):
    def touch(self) -> None: ...


_lock = threading.Lock()
_followed: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()
_installed = False


def follow_optimizer_steps(watch: Touchable, tensor_ids: frozenset[int]) -> None:
    """Touch ``watch`` after every optimizer step that updates one of the tensors ``tensor_ids`` names."""
    global _installed
    with _lock:
        _followed[watch] = tensor_ids
        if not _installed:
            register_optimizer_step_pre_hook(_stepped)
            register_optimizer_step_post_hook(_stepped)
            _installed = True


def _stepped(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """Before the step (a refit running meanwhile then knows the user wrote), and after it (the next call looks)."""
    with _lock:
        followed = list(_followed.items())
    if not followed:
        return
    stepped = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    for watch, ids in followed:
        if not ids.isdisjoint(stepped):
            watch.touch()
