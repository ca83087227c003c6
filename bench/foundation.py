"""The foundation's costs: graph keys, recording a call, recording many leaves, importing.

* graph key: ``ForwardSignature.normalize`` + ``GraphRecorder.key`` for a call with three
  tensors, the work every tuned call does before it is routed (target <= 20 us);
* recording overhead: a RECORDING ``aitune_core.Module`` around a trivial forward, minus
  calling that forward directly, paired round by round;
* recording a call whose argument holds 10,000 tensors, on a new graph (metadata and a
  CPU copy of the sample) and on an existing one (metadata and widening the spec); the
  same with the garbage collector off shows how much of it is collections that the
  allocations trigger (torch keeps a few hundred thousand objects alive to traverse);
* ``import aitune_core`` on top of ``import torch``, in fresh processes.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import aitune_core as ait
from aitune_core.context import BATCH_SIZE_KEY, global_context
from bench.timing import Options, Result, Stats, alternate, calibrate, paired_differences, per_call, run_python

KEY_TARGET_US = 20.0
_names = itertools.count()


def _name(stem: str) -> str:
    return f"bench-{stem}-{next(_names)}"


class ThreeTensors(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return x


class CountLeaves(nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> int:
        return len(xs)


def _hot_loop(fn: Callable[[], Any]) -> Callable[[], float]:
    number = calibrate(fn, target_s=0.01)
    return lambda: per_call(fn, number)


def graph_key_cost(options: Options) -> list[Result]:
    module = ait.Module(ThreeTensors(), _name("key"))
    signature, recorder = module.signature, module._recorder
    strict = ait.config.strict_mode
    x, mask, bias = torch.randn(8, 16), torch.ones(8, 16, dtype=torch.bool), torch.randn(16)
    calls: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
        "positional": ((x, mask, bias), {}),
        "keyword": ((), {"x": x, "mask": mask, "bias": bias}),
        "mixed": ((x,), {"bias": bias, "mask": mask}),
    }

    def key_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
        return lambda: recorder.key(signature.normalize(args, kwargs), strict)

    keys = {key_of(args, kwargs)() for args, kwargs in calls.values()}
    assert len(keys) == 1, "positional, keyword and mixed calls must have one graph key"
    variants = {name: _hot_loop(key_of(args, kwargs)) for name, (args, kwargs) in calls.items()}
    measured = alternate(variants, rounds=options.rounds(31, 7))
    return [
        Result("graph key, 3 tensors", name, Stats.of(values), "us", KEY_TARGET_US, "normalize + GraphRecorder.key")
        for name, values in measured.items()
    ]


def recording_overhead(options: Options) -> list[Result]:
    inner = ThreeTensors()
    wrapped = ait.Module(ThreeTensors(), _name("record"))
    args = (torch.randn(8, 16), torch.ones(8, 16, dtype=torch.bool), torch.randn(16))
    with global_context:
        global_context.set(BATCH_SIZE_KEY, 8)
        wrapped(*args)  # the graph exists from here on: later calls widen it
        variants = {
            "forward called directly": _hot_loop(lambda: inner.forward(*args)),
            "unwrapped module called": _hot_loop(lambda: inner(*args)),
            "aitune Module, RECORDING": _hot_loop(lambda: wrapped(*args)),
        }
        measured = alternate(variants, rounds=options.rounds(31, 7))
    assert wrapped.state is ait.ModuleState.RECORDING and len(wrapped.graph_specs) == 1
    overhead = paired_differences(measured["aitune Module, RECORDING"], measured["forward called directly"])
    results = [Result("record one call", name, Stats.of(values), "us") for name, values in measured.items()]
    results.append(
        Result("record one call", "overhead over direct forward", Stats.of(overhead), "us", note="paired per round")
    )
    return results


def recording_many_leaves(options: Options, leaves: int = 10_000) -> list[Result]:
    first = [torch.randn(1, 4) for _ in range(leaves)]
    second = [torch.randn(2, 4) for _ in range(leaves)]
    widened = ait.Module(CountLeaves(), _name("leaves"))
    with global_context:
        global_context.set(BATCH_SIZE_KEY, 1)
        widened(first)

    def new_graph() -> float:
        module = ait.Module(CountLeaves(), _name("leaves"))
        with global_context:
            global_context.set(BATCH_SIZE_KEY, 1)
            start = time.perf_counter()
            module(first)
            return time.perf_counter() - start

    def existing_graph() -> float:
        with global_context:
            global_context.set(BATCH_SIZE_KEY, 2)
            start = time.perf_counter()
            widened(second)
            return time.perf_counter() - start

    def existing_graph_gc_off() -> float:
        gc.disable()
        try:
            return existing_graph()
        finally:
            gc.enable()

    variants = {
        "new graph": new_graph,
        "existing graph": existing_graph,
        "existing graph, gc off": existing_graph_gc_off,
    }
    measured = alternate(variants, rounds=options.rounds(15, 3))
    assert len(widened.graph_specs[0].input_spec.tensor_data) == leaves
    return [
        Result(
            f"record {leaves:,} tensor leaves",
            name,
            Stats.of(values),
            "ms",
            note=f"{Stats.of(values).median / leaves * 1e6:.1f} us per leaf",
        )
        for name, values in measured.items()
    ]


_IMPORT_CODE = """\
import time, torch
start = time.perf_counter()
{statement}
print(time.perf_counter() - start)
"""


def import_cost(options: Options) -> list[Result]:
    runs = options.rounds(10, 3)
    statements = {
        "import aitune_core": "import aitune_core",
        "+ Module, SampleMetadata": "import aitune_core\naitune_core.Module, aitune_core.SampleMetadata",
    }
    values: dict[str, list[float]] = {name: [] for name in statements}
    for _ in range(runs):  # alternate the two, one fresh process each
        for name, statement in statements.items():
            values[name] += run_python(_IMPORT_CODE.format(statement=statement), runs=1)
    return [
        Result("import on top of torch", name, Stats.of(measured), "ms", note="fresh process each")
        for name, measured in values.items()
    ]


def run(options: Options) -> list[Result]:
    """Every foundation measurement, with torch on one thread (left so for the saved environment)."""
    torch.set_num_threads(options.threads)
    results = []
    for measure in (graph_key_cost, recording_overhead, recording_many_leaves, import_cost):
        results += measure(options)
    return results
