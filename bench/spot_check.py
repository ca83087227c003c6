"""What spot checks (``config.spot_check_every``) add to a routed call.

A small MLP (64 -> 256 -> 64, batch 1) is tuned with eager's own backend, so the
route's call costs what the model does and every microsecond added is the spot
checks'. Off, every 1000th and every 100th call checked are measured in alternating
rounds of 5000 calls, each call timed on its own (medians, which a busy machine's
preemptions do not move as they move means):

* the typical call: an unchecked one, which counts and reads the setting;
* the checked call: it copies its inputs, runs the original module on them and
  compares the outputs (:mod:`aitune_core.module.spot_check`);
* per call, amortized: typical + (checked - typical) / N;
* the check's own parts: an eager call, and the comparison of outputs that agree.

``python -m bench spot_check`` runs it.
"""

from __future__ import annotations

import itertools
import time

import torch

from bench.timing import Options, Result, Stats, alternate, median, paired_differences, per_call

EVERY = {"off": 0, "every 1000": 1000, "every 100": 100}
CALLS = 5000
_names = itertools.count()


def run(options: Options) -> list[Result]:
    import aitune_core as ait
    from aitune_core.backends.tolerances import Tolerances
    from aitune_core.demo.models import DemoMLP
    from aitune_core.profiling import ProfileConfig
    from aitune_core.validation.compare import quickly_close

    torch.set_num_threads(options.threads)
    torch.manual_seed(0)
    model = ait.Module(DemoMLP(width=64, hidden=256).eval(), f"bench-spot-check-{next(_names)}")
    profile = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.01, max_time_s=0.05, max_batch_search=False)
    strategy = ait.OneBackendStrategy(ait.TorchEagerBackend(), profile=profile)
    ait.tune(model, [torch.randn(64) for _ in range(8)], batch_sizes=[1, 2], strategy=strategy)
    x = torch.randn(1, 64)
    checked: dict[str, list[float]] = {name: [] for name in EVERY}

    def calls(name: str) -> float:
        """The median unchecked call of one round; the median checked one goes to ``checked``."""
        every = EVERY[name]
        ait.config.spot_check_every = every
        model.__dict__["_spot_checks"].calls = 0  # so that calls every-1, 2*every-1, ... are the checked ones
        times = []
        with torch.no_grad():
            for _ in range(CALLS):
                start = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - start)
        due = set(range(every - 1, CALLS, every)) if every else set()
        if due:
            checked[name].append(median([times[index] for index in sorted(due)]))
        return median([value for index, value in enumerate(times) if index not in due])

    previous = ait.config.spot_check_every
    rounds = options.rounds(31, 5)
    try:
        typical = alternate({name: lambda name=name: calls(name) for name in EVERY}, rounds)
    finally:
        ait.config.spot_check_every = previous
    checked = {name: values[-rounds:] for name, values in checked.items()}  # the warm-up round's dropped
    with torch.no_grad():
        reference = model.module(x)
        eager_s = [per_call(lambda: model.module(x), 2000) for _ in range(9)]
        compare_s = [per_call(lambda: quickly_close(reference, reference, Tolerances()), 2000) for _ in range(9)]

    results = [Result("typical call", name, Stats.of(values), "us") for name, values in typical.items()]
    for name, every in EVERY.items():
        if not every:
            continue
        added = paired_differences(typical[name], typical["off"])
        extra = paired_differences(checked[name], typical[name])
        amortized = [a + b / every for a, b in zip(added, extra, strict=True)]
        results += [
            Result("typical call, added", name, Stats.of(added), "us", note="paired per round"),
            Result("checked call, added", name, Stats.of(paired_differences(checked[name], typical["off"])), "us"),
            Result("per call, amortized, added", name, Stats.of(amortized), "us", note="typical + checked extra / N"),
        ]
    results.append(Result("the check's parts", "eager call", Stats.of(eager_s), "us"))
    results.append(Result("the check's parts", "comparison", Stats.of(compare_s), "us"))
    return results
