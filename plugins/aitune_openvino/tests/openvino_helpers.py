"""What the plugin's tests share: tuning one model with one backend, profiled briefly (the kit's SHORT_PROFILE)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

import aitune_core as ait
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_openvino import OpenVINOBackend

_names = itertools.count()


def tune_alone(
    model: torch.nn.Module,
    dataset: Sequence[Any],
    backend: OpenVINOBackend | None = None,
    batch_sizes: list[int] | None = None,
    **module_options: Any,
) -> tuple[ait.Module, Any]:
    """``model`` wrapped and tuned with ``backend`` (the default config) alone, selected whatever the timings."""
    wrapped = ait.Module(model, f"openvino-{next(_names)}", **module_options)
    strategy = ait.OneBackendStrategy(backend or OpenVINOBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    report = ait.tune(wrapped, dataset, batch_sizes=batch_sizes, strategy=strategy)
    return wrapped, report


def served_by(wrapped: ait.Module) -> list[Any]:
    """The backend of each route of a tuned wrapper."""
    return [route.backend for route in wrapped.routes.values()]
