"""Dynamic shapes: a declared range against the recorded one, and a partitioned model against eager.

Declared range: a BERT-style encoder (``aitune_core.testing.models.TinyEncoder``,
width 64) is recorded at sequence lengths 16, 32 and 64 and tuned on Inductor JIT
twice, once as recorded and once declared 1 to 512. A call at length 300, batch 2, is
then timed on eager, on the module tuned as recorded (outside its range: it falls
back to eager) and on the module tuned with the declaration (served compiled).

Partitioned: ``aitune_core.testing.models.ThreeBlocks`` (width 512, two Linear+GELU
layers per outer block, a middle block that decides on ``.item()``) is tuned on ONNX
Runtime twice: as it is, where the export of the whole model is declined and the
module stays eager (the all-eager fallback), and with ``partition=True``, where the
outer blocks run on ONNX Runtime and the middle one eagerly. Timed at batch 8 against
eager.

Variants alternate round by round; reported are medians with p10 .. p90 and the
ratio of the medians. ``python -m bench dynamic`` runs it (needs aitune-inductor and
aitune-onnx; each part is skipped, saying so, without its plugin).
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from typing import Any

import torch

from bench.timing import Options, Result, Stats, alternate, calibrate, median, per_call

LENGTH = 300
_names = itertools.count()


def _profile() -> Any:
    from aitune_core.profiling import ProfileConfig

    return ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.01, max_time_s=0.05, max_batch_search=False)


def _tuned_encoder(model: torch.nn.Module, declared: bool) -> Any:
    from aitune_inductor import TorchInductorJitBackend

    import aitune_core as ait
    from aitune_core.testing.models import encoder_call

    shapes = {"input_ids": {1: ait.DynamicDim("seq", min=1, max=512, opt=128)}} if declared else None
    wrapped = ait.Module(model, f"bench-encoder-{next(_names)}", dynamic_shapes=shapes)
    strategy = ait.OneBackendStrategy(TorchInductorJitBackend(), profile=_profile())
    ait.tune(wrapped, [encoder_call(2, length)[1] for length in (16, 32, 64)], strategy=strategy)
    return wrapped


def _timed(fn: Callable[[], Any]) -> Callable[[], float]:
    number = calibrate(fn)
    return lambda: per_call(fn, number)


def declared_results(options: Options) -> list[Result]:
    from aitune_core.testing.models import TinyEncoder, encoder_call

    model = TinyEncoder(width=64).eval()
    recorded = _tuned_encoder(model, declared=False)
    declared = _tuned_encoder(model, declared=True)
    _, kwargs = encoder_call(2, LENGTH)
    with torch.no_grad():
        torch.testing.assert_close(declared(**kwargs), model(**kwargs), rtol=1e-4, atol=1e-4)
        variants = {
            "eager": _timed(lambda: model(**kwargs)),
            "tuned as recorded (16-64)": _timed(lambda: recorded(**kwargs)),
            "tuned, declared 1-512": _timed(lambda: declared(**kwargs)),
        }
        times = alternate(variants, rounds=options.rounds(15, 3))
    eager = median(times["eager"])
    name = f"encoder call at length {LENGTH}, batch 2"
    return [
        Result(name, variant, Stats.of(values), unit="ms", note=f"{eager / median(values):.2f}x vs eager")
        for variant, values in times.items()
    ]


def _tuned_blocks(model: torch.nn.Module, partition: bool) -> Any:
    from aitune_onnx import ONNXRuntimeBackend

    import aitune_core as ait

    wrapped = ait.Module(model, f"bench-blocks-{next(_names)}")
    strategy = ait.MaxThroughputStrategy([ONNXRuntimeBackend(), ait.TorchEagerBackend()], profile=_profile())
    ait.tune(wrapped, [torch.randn(512) for _ in range(16)], batch_sizes=[1, 8], strategy=strategy, partition=partition)
    return wrapped


def partition_results(options: Options) -> list[Result]:
    from aitune_core.testing.models import ThreeBlocks

    model = ThreeBlocks(width=512).eval()
    fallback = _tuned_blocks(model, partition=False)
    partitioned = _tuned_blocks(model, partition=True)
    x = torch.randn(8, 512)
    with torch.no_grad():
        torch.testing.assert_close(partitioned(x), model(x), rtol=1e-4, atol=1e-4)
        variants = {
            "eager": _timed(lambda: model(x)),
            "tuned, all-eager fallback": _timed(lambda: fallback(x)),
            "tuned, partition=True": _timed(lambda: partitioned(x)),
        }
        times = alternate(variants, rounds=options.rounds(15, 3))
    eager = median(times["eager"])
    fallen = median(times["tuned, all-eager fallback"])
    name = "three blocks, middle decides on .item(), batch 8"
    return [
        Result(
            name,
            variant,
            Stats.of(values),
            unit="ms",
            note=f"{eager / median(values):.2f}x vs eager, {fallen / median(values):.2f}x vs fallback",
        )
        for variant, values in times.items()
    ]


def run(options: Options) -> list[Result]:
    torch.set_num_threads(options.threads)
    results = []
    if importlib.util.find_spec("aitune_inductor") is not None:
        results += declared_results(options)
    else:
        print("dynamic: declared range skipped, aitune-inductor is not installed")
    if importlib.util.find_spec("aitune_onnx") is not None:
        results += partition_results(options)
    else:
        print("dynamic: partitioning skipped, aitune-onnx is not installed")
    return results
