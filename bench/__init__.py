"""Benchmarks that print numbers: ``python -m bench [suite ...]``.

Suites are registered by name in :data:`SUITES`, mapped to the module that holds
them. A suite module defines ``run(options: bench.timing.Options) -> list[Result]``
and is imported only when it is run. To add one, write ``bench/<name>.py`` and add
a line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.timing import Options, Result

SUITES: dict[str, str] = {
    "foundation": "bench.foundation",
    "inductor": "bench.inductor",
    "checkpoint": "bench.checkpoint",
    "executors": "bench.executors",
    "onnx": "bench.onnx",
    "openvino": "bench.openvino",
    "torchao": "bench.torchao",
    "tuning": "bench.tuning",
    "selection": "bench.selection",
    "warm_cache": "bench.warm_cache",
    "decode": "bench.decode",
    "dynamic": "bench.dynamic",
    "jit": "bench.jit",
    "jit_serving": "bench.jit_serving",
    "jit_load": "bench.jit_load",
    "wrap": "bench.wrap",
    "tuning_time": "bench.tuning_time",
    "accuracy": "bench.accuracy",
    "cache_bound": "bench.cache_bound",
    "spot_check": "bench.spot_check",
    "ray_serve": "bench.ray_serve",
}


def load_suite(name: str) -> Callable[[Options], list[Result]]:
    """The ``run`` function of a registered suite."""
    try:
        module_name = SUITES[name]
    except KeyError:
        raise KeyError(f"unknown bench suite {name!r}; choose from {', '.join(sorted(SUITES))}") from None
    return importlib.import_module(module_name).run  # type: ignore[no-any-return]
