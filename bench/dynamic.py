"""Dynamic shapes: a declared range against the recorded one, and a partitioned model against eager.

Declared range: a BERT-style encoder (``aitune_core.testing.models.TinyEncoder``,
width 64) is recorded at sequence lengths 16, 32 and 64 and tuned on Inductor JIT
twice, once as recorded and once declared 1 to 512. A call at length 300, batch 2, is
then timed on eager, on the module tuned as recorded (outside its range: it falls
back to eager) and on the module tuned with the declaration (served compiled).

Partitioned: see :func:`partition_results`.

Variants alternate round by round; reported are medians with p10 .. p90 and the
ratio of the medians. ``python -m bench dynamic`` runs it (needs aitune-inductor).
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


def run(options: Options) -> list[Result]:
    if importlib.util.find_spec("aitune_inductor") is None:
        print("dynamic: skipped, aitune-inductor is not installed")
        return []
    torch.set_num_threads(options.threads)
    return declared_results(options)
