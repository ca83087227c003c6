"""Which batch sizes to profile, and the search for the batch size with the best throughput.

The search doubles the batch from the largest recorded one, and stops at the first of:
throughput no longer rising by ``saturation``, the memory guard, an out-of-memory
error, any other error from the model at that size (logged as "batch search skipped"),
``max_batch_size``, or the time budget. Without such bounds a search can climb
to batch 262,144 and spend half an hour there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
from aitune_core.profiling.timer import Timer
from aitune_core.validation.inputs import CallInputs

MEMORY_FRACTION = 0.25


def available_memory_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def call_bytes(call: CallInputs) -> int:
    total = 0
    for value in (*call.args, *call.kwargs.values()):
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return total


def search_max_batch(
    fn: Callable[..., Any],
    make_call: Callable[[int], CallInputs],
    start: int,
    device: torch.device,
    config: ProfileConfig,
    log: Any,
    timer: Timer | None = None,
) -> tuple[int, list[Measurement]]:
    """Find the batch size past which throughput stops growing (see module docstring)."""
    deadline = time.perf_counter() + config.max_batch_search_time_s
    # A step only has to show whether throughput still grows by ``saturation``: a short,
    # steady median is enough; the comparisons later measure the chosen size properly.
    step = attrs.evolve(config, warmup_iterations=1, min_time_s=config.min_time_s / 2, max_time_s=config.max_time_s / 3)
    memory = available_memory_bytes(device)
    measurements: list[Measurement] = []
    best_batch = start
    best: Measurement | None = None
    batch = start
    while batch <= config.max_batch_size:
        try:
            call = make_call(batch)
            if memory is not None and call_bytes(call) * 4 > memory * MEMORY_FRACTION:
                log.info("max batch search stopped", reason="memory guard", batch_size=batch)
                break
            result = measure(fn, call, step, batch, timer)
        except torch.OutOfMemoryError:
            log.info("max batch search stopped", reason="out of memory", batch_size=batch)
            break
        except Exception as error:  # a model that cannot run at this size ends the search, not tune()
            log.warning(
                "batch search skipped",
                reason=f"eager raised {type(error).__name__} at batch {batch}: {error}",
                batch_size=batch,
                fix="register the input's container type so its tensors resize with the batch",
            )
            break
        measurements.append(result)
        if best is not None and result.throughput < best.throughput * config.saturation:
            if result.throughput > best.throughput:
                best, best_batch = result, batch
            break
        best, best_batch = result, batch
        if time.perf_counter() > deadline:
            log.info("max batch search stopped", reason="time budget", batch_size=batch)
            break
        batch *= 2
    return best_batch, measurements
