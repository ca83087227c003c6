"""Which backend serves which batch sizes, decided on scripted timings.

Every verdict here comes from a :class:`ScriptedTimer` with given latencies (and seeded
noise where the test is about noise), so a choice that is wrong is wrong on every
machine, and one that is right cannot be right by luck of the machine's load.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import torch
from torch import nn
from tuning_helpers import FAST_PROFILE, SlowableMLP

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.profiling.timer import EAGER, Latency, ScriptedTimer
from aitune_core.reporting.summary import EAGER_ROW, TuneReport
from aitune_core.strategies import (
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
    MinLatencyStrategy,
    TuneStrategy,
)
from aitune_core.tuning import tune

PROFILE = attrs.evolve(FAST_PROFILE, max_batch_search=False, min_time_s=0.05, max_time_s=0.5)
"""Measured (scripted) seconds enough for a sound interval to tell 10% apart under :data:`REALISTIC` noise."""
SHORT_PROFILE = attrs.evolve(PROFILE, min_time_s=0.005, max_time_s=0.03)
"""30 ms of measurement: a handful of rounds."""
SIZES = [1, 2, 4, 8, 16, 32]
REALISTIC = {"noise": 0.05, "outlier_rate": 0.02}
"""Noise as a shared CPU gives it: 5% spread per call, one call in fifty 20x slower."""


@attrs.frozen
class LabelConfig(BackendConfig):
    label: str = ""


class LabelBackend(Backend):
    """Runs a copy of the module and counts its calls; ``label`` tells instances apart in reports and timings."""

    name = "test_label"
    config_class = LabelConfig

    def __init__(self, config: LabelConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.calls = 0
        self._module: nn.Module | None = None

    def _build(self, context: BuildContext) -> None:
        self._module = copy.deepcopy(context.module)

    def _activate(self) -> None:
        assert self.context is not None
        self._module = copy.deepcopy(self.context.module)

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        self.calls += 1
        return self._module(*args, **kwargs)


def named(label: str) -> str:
    """The variant name a ScriptedTimer sees for ``LabelBackend(label=label)``."""
    return LabelBackend(label=label).describe()


def by_size(table: dict[int, float]) -> Callable[[int], float]:
    return lambda batch: table[batch]


def run(
    unique_name: Callable[[str], str],
    strategy: TuneStrategy,
    sizes: list[int] = SIZES,
) -> tuple[ait.Module, TuneReport, Route]:
    module = ait.Module(SlowableMLP().eval(), unique_name("mlp"))
    report = tune(module, [torch.randn(16) for _ in range(8)], batch_sizes=sizes, strategy=strategy)
    (route,) = module.routes.values()
    return module, report, route


def served(route: Route, high: int = SIZES[-1]) -> list[tuple[int, int, str]]:
    """The route's ranges with who serves them: a label, "eager", or "TorchEagerBackend"."""
    described = []
    for low, up_to, backend in route.ranges(1, high):
        if backend is None:
            who = "eager"
        elif isinstance(backend, LabelBackend):
            who = backend.config.label  # type: ignore[attr-defined]
        else:
            who = type(backend).__name__
        described.append((low, up_to, who))
    return described


def rows_of(report: TuneReport) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def reaches(module: ait.Module, route: Route, batch: int) -> str:
    """Who runs a call at ``batch``: a label, or "eager" for the original module."""
    counted = [b for b in route.backends if isinstance(b, LabelBackend)]
    before = {id(b): b.calls for b in counted}
    x = torch.randn(batch, 16)
    torch.testing.assert_close(module(x), module.module(x))
    moved = [b for b in counted if b.calls != before[id(b)]]
    assert len(moved) <= 1
    return moved[0].config.label if moved else "eager"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- traps and noise
def eager_latency(batch: int) -> float:
    return 0.2e-3 + 0.1e-3 * batch


def trap_run(unique_name: Callable[[str], str], candidate: Latency, seed: int) -> tuple[TuneReport, Route]:
    timer = ScriptedTimer(
        {EAGER: eager_latency, "TorchEagerBackend()": eager_latency, named("x"): candidate}, seed=seed, **REALISTIC
    )
    strategy = MaxThroughputStrategy([LabelBackend(label="x"), TorchEagerBackend()], profile=PROFILE, timer=timer)
    _, report, route = run(unique_name, strategy, sizes=[1, 4, 16])
    return report, route


def test_a_backend_ten_percent_slower_than_eager_is_never_selected(unique_name):
    """A fixed extra 10% per call must lose on every seed, however the noise and outliers fall."""
    selected = []
    for seed in range(20):
        report, route = trap_run(unique_name, lambda b: 1.1 * eager_latency(b), seed)
        row = rows_of(report)[named("x")]
        if row.status == "selected" or any(isinstance(b, LabelBackend) for b in route.backends):
            selected.append(seed)
        assert all(s.verdict(1.01) != "faster" for s in row.speedups.values()), (seed, row.speedups)
    assert selected == []


def test_a_backend_ten_percent_faster_than_eager_is_selected(unique_name):
    wins = 0
    for seed in range(20):
        report, route = trap_run(unique_name, lambda b: eager_latency(b) / 1.1, seed)
        row = rows_of(report)[named("x")]
        wins += row.status == "selected" and served(route, 16)[-1][2] == "x"
    assert wins >= 18


def test_a_copy_of_eager_is_never_reported_faster_than_eager(unique_name):
    """Same latency as eager, timed under noise: no seed may call the candidate faster or let it serve.

    Eager's own row (TorchEagerBackend, timed for the table, never serving) gets a 90%
    interval like any row: one-sided, it may clear the 1.01x gate by luck in about one
    comparison of twenty; of these 60 it does at most twice (where it serves, eager serves).
    """
    found: list[tuple[Any, ...]] = []
    lucky: list[tuple[Any, ...]] = []
    for seed in range(20):
        report, route = trap_run(unique_name, eager_latency, seed)
        rows = rows_of(report)
        for name, into in ((named("x"), found), ("TorchEagerBackend()", lucky)):
            speedups = rows[name].speedups
            into += [(seed, name, size, s.describe()) for size, s in speedups.items() if s.verdict(1.01) == "faster"]
        if rows[named("x")].status == "selected" or not isinstance(route.backend, TorchEagerBackend):
            found.append((seed, "selected", served(route, 16)))
    assert found == []
    assert len(lucky) <= 2, lucky


def test_the_eager_candidate_never_outranks_a_real_one_even_when_it_measures_faster(unique_name):
    """TorchEagerBackend is the original module: serving it is serving eager, so it cannot take x's batches."""
    timer = ScriptedTimer({EAGER: 1e-3, "TorchEagerBackend()": 0.5e-3, named("x"): 0.8e-3})
    strategy = MaxThroughputStrategy([TorchEagerBackend(), LabelBackend(label="x")], profile=PROFILE, timer=timer)
    module, report, route = run(unique_name, strategy, sizes=[1, 4, 16])
    assert served(route, 16) == [(1, 16, "x")]
    eager_row = rows_of(report)["TorchEagerBackend()"]
    assert eager_row.status == "passed" and eager_row.serves == []
    assert eager_row.speedups[16].verdict(1.01) == "faster"  # measured faster, and still not serving
    assert reaches(module, route, 16) == "x"


def noisy_run(unique_name: Callable[[str], str], seed: int) -> tuple[ait.Module, TuneReport, Route]:
    """1.02x eager, timed with 60% noise per call: a few rounds cannot tell it from the 1.01x gate."""
    timer = ScriptedTimer({EAGER: 1e-3, named("x"): 1e-3 / 1.02}, noise=0.6, seed=seed)
    strategy = MaxThroughputStrategy([LabelBackend(label="x")], profile=SHORT_PROFILE, timer=timer)
    return run(unique_name, strategy, sizes=[1, 4])


def test_too_noisy_to_tell_leaves_eager_serving_and_says_why(unique_name):
    module, report, route = noisy_run(unique_name, seed=1)
    row = rows_of(report)[named("x")]
    assert row.status == "rejected" and row.stage == "performance"
    assert row.reason.startswith("undecided: too noisy (p90/p50 = "), row.reason
    assert "at batch 4" in row.reason and "the 1.01x gate needs the low end above it" in row.reason
    assert isinstance(route.backend, TorchEagerBackend) and not route.lower
    fallback = rows_of(report)["TorchEagerBackend()"]
    assert fallback.status == "fallback" and fallback.reason == row.reason
    assert reaches(module, route, 4) == "eager"


def test_too_noisy_to_tell_is_mostly_undecided(unique_name):
    """60% noise can hardly tell 1.02x from the 1.01x gate in 8 clean rounds.

    A 90% interval misses the truth in about one comparison of ten, so a verdict either
    way comes from luck that rarely: at most two seeds of ten decide, and a "faster" one
    still routes to a backend that is in truth 2% faster.
    """
    decided = {}
    for seed in range(10):
        _, report, route = noisy_run(unique_name, seed)
        row = rows_of(report)[named("x")]
        if not row.reason.startswith("undecided: too noisy") or not isinstance(route.backend, TorchEagerBackend):
            decided[seed] = (row.status, [s.describe() for s in row.speedups.values()])
    assert len(decided) <= 2, decided


# --------------------------------------------------------------------------- routing by batch size
A_TIMES = {b: 0.2e-3 + 0.5e-3 * b for b in SIZES}
"""Little overhead per call, the same cost per sample as eager: wins the small batches."""
B_TIMES = {b: 2e-3 + 0.2e-3 * b for b in SIZES}
"""A large overhead per call, a lower cost per sample: wins the large batches."""
EAGER_TIMES = {b: 1e-3 + 0.5e-3 * b for b in SIZES}


def split_timer(seed: int = 0, **options: Any) -> ScriptedTimer:
    latencies = {EAGER: by_size(EAGER_TIMES), named("a"): by_size(A_TIMES), named("b"): by_size(B_TIMES)}
    return ScriptedTimer(latencies, seed=seed, **options)


def two_backends() -> list[Backend]:
    return [LabelBackend(label="a"), LabelBackend(label="b")]


def test_each_batch_range_goes_to_the_backend_fastest_there(unique_name):
    strategy = MaxThroughputStrategy(two_backends(), profile=PROFILE, timer=split_timer(noise=0.02))
    module, report, route = run(unique_name, strategy)

    assert served(route) == [(1, 4, "a"), (5, 32, "b")]
    (up_to, lower), *rest = route.lower
    assert up_to == 4 and isinstance(lower, LabelBackend) and lower.config.label == "a" and rest == []  # type: ignore[attr-defined]
    assert route.eager_up_to is None
    rows = rows_of(report)
    assert rows[named("a")].status == rows[named("b")].status == "selected"
    assert rows[named("a")].serves == [(1, 4)] and rows[named("b")].serves == [(5, 32)]
    assert report.graphs[0].eager_serves == []
    assert report.selected(module.name) == named("b")
    text = report.summary()
    assert "batch 1-4" in text and "batch 5-32" in text
    for batch, who in ((1, "a"), (2, "a"), (4, "a"), (5, "b"), (32, "b")):
        assert reaches(module, route, batch) == who, batch


def test_the_by_batch_table_marks_what_serves_each_size(unique_name):
    strategy = MaxThroughputStrategy(two_backends(), profile=PROFILE, timer=split_timer())
    _, report, _ = run(unique_name, strategy)
    table = report.summary().split("Throughput by batch size", 1)[1]
    lines = {line.split("  ")[0].strip(): line for line in table.splitlines() if "  " in line}
    cells = {name: [cell.strip() for cell in lines[name].split("  ") if cell.strip()][1:] for name in lines}
    marked = {name: [cell.endswith("*") for cell in cells[name]] for name in (EAGER_ROW, named("a"), named("b"))}
    assert marked[named("a")] == [True, True, True, False, False, False]
    assert marked[named("b")] == [False, False, False, True, True, True]
    assert marked[EAGER_ROW] == [False] * 6


def test_every_row_is_shown_at_one_batch_and_its_speedup_is_the_throughput_ratio(unique_name):
    timer = split_timer(seed=5, **REALISTIC)
    timer.latencies[named("c")] = lambda b: 1.3 * EAGER_TIMES[b]  # slower everywhere: rejected, still measured
    timer.latencies["TorchEagerBackend()"] = by_size(EAGER_TIMES)
    candidates = [*two_backends(), LabelBackend(label="c"), TorchEagerBackend()]
    _, report, _ = run(unique_name, MaxThroughputStrategy(candidates, profile=PROFILE, timer=timer))
    headers = report.headers()
    column = {name: headers.index(name) for name in ("Backend", "Batch", "Throughput (samples/s)")}
    speedup_column = next(i for i, h in enumerate(headers) if h.startswith("Speedup"))
    rows = [row for row in report.rows() if row[column["Batch"]] != "-"]
    names = {row[column["Backend"]] for row in rows}
    assert names == {EAGER_ROW, named("a"), named("b"), named("c"), "TorchEagerBackend()"}
    assert {row[column["Batch"]] for row in rows} == {32}
    eager = float(next(row for row in rows if row[column["Backend"]] == EAGER_ROW)[column["Throughput (samples/s)"]])
    for row in rows:
        if row[column["Backend"]] == EAGER_ROW:
            continue
        printed = float(row[speedup_column].split("x", 1)[0])
        ratio = float(row[column["Throughput (samples/s)"]]) / eager
        assert abs(printed - ratio) <= 0.0051, row


def test_the_same_seed_gives_the_same_routes(unique_name):
    def once() -> tuple[list[tuple[int, int, str]], dict[str, list[str]]]:
        strategy = MaxThroughputStrategy(two_backends(), profile=PROFILE, timer=split_timer(seed=11, **REALISTIC))
        _, report, route = run(unique_name, strategy)
        speedups = {row.backend: [s.describe() for s in row.speedups.values()] for row in report.graphs[0].candidates}
        return served(route), speedups

    first, second = once(), once()
    assert first == second
    assert first[0] == [(1, 4, "a"), (5, 32, "b")]


def test_min_latency_routes_per_batch_size_on_the_same_measurements(unique_name):
    """At one batch size the lowest latency is the highest throughput: same timings, same ranges."""
    strategy = MinLatencyStrategy(two_backends(), profile=PROFILE, timer=split_timer(seed=4, noise=0.02))
    module, report, route = run(unique_name, strategy)
    assert served(route) == [(1, 4, "a"), (5, 32, "b")]
    assert reaches(module, route, 2) == "a" and reaches(module, route, 32) == "b"
    throughput = MaxThroughputStrategy(two_backends(), profile=PROFILE, timer=split_timer(seed=4, noise=0.02))
    _, same, _ = run(unique_name, throughput)
    for name in (named("a"), named("b")):
        assert rows_of(report)[name].speedups == rows_of(same)[name].speedups


def test_latency_budget_keeps_a_backend_to_the_batches_where_it_fits(unique_name):
    """Twice as fast as eager everywhere, but over the 5 ms budget above batch 8: eager serves there."""
    timer = ScriptedTimer({EAGER: lambda b: 1e-3 * b, named("x"): lambda b: 0.5e-3 * b}, noise=0.02, seed=1)
    strategy = LatencyBudgetStrategy([LabelBackend(label="x")], budget_ms=5.0, profile=PROFILE, timer=timer)
    module, report, route = run(unique_name, strategy)
    assert served(route) == [(1, 8, "x"), (9, 32, "TorchEagerBackend")]
    row = rows_of(report)[named("x")]
    assert row.status == "selected" and row.serves == [(1, 8)]
    assert reaches(module, route, 8) == "x" and reaches(module, route, 16) == "eager"


# --------------------------------------------------------------------------- max_backends
THREE = {
    # eager takes 1 ms at every size; each backend is much faster on its own range
    "a": {1: 0.4e-3, 2: 0.4e-3, 4: 1.1e-3, 8: 1.1e-3, 16: 0.95e-3, 32: 0.95e-3},
    "b": {1: 1.1e-3, 2: 1.1e-3, 4: 0.5e-3, 8: 0.5e-3, 16: 1.1e-3, 32: 1.1e-3},
    "c": {1: 1.2e-3, 2: 1.2e-3, 4: 1.2e-3, 8: 1.2e-3, 16: 0.8e-3, 32: 0.8e-3},
}


def close_call(a_small: float, seed: int) -> MaxThroughputStrategy:
    """b is 2x faster than a from batch 4 on; at batch 1 and 2, a takes ``a_small`` against b's 0.5 ms."""
    a = {1: a_small, 2: a_small, 4: 1.0e-3, 8: 1.0e-3, 16: 1.0e-3, 32: 1.0e-3}
    b = {1: 0.5e-3, 2: 0.5e-3, 4: 0.5e-3, 8: 0.5e-3, 16: 0.5e-3, 32: 0.5e-3}
    timer = ScriptedTimer({EAGER: 2e-3, named("a"): by_size(a), named("b"): by_size(b)}, seed=seed, noise=0.03)
    return MaxThroughputStrategy(two_backends(), profile=SHORT_PROFILE, timer=timer)


@pytest.mark.parametrize("a_small", [0.5e-3, 0.47e-3])
@pytest.mark.parametrize("seed", range(4))
def test_a_size_won_by_a_hair_goes_to_the_backend_that_wins_the_others(unique_name, a_small, seed):
    """a is first in priority order and as fast, or 6% faster, at batch 1-2: not worth a second runtime."""
    module, report, route = run(unique_name, close_call(a_small, seed))
    assert served(route) == [(1, 32, "b")]
    row = rows_of(report)[named("a")]
    assert row.status == "passed"
    assert "one runtime serves them all" in row.reason or "others were faster" in row.reason, row.reason
    assert reaches(module, route, 1) == "b"


def test_a_backend_fastest_at_a_size_but_within_the_margin_says_why_it_serves_none(unique_name):
    _, report, _ = run(unique_name, close_call(0.47e-3, seed=0))
    reason = rows_of(report)[named("a")].reason
    assert "fastest at batch 1, 2" in reason and "one runtime serves them all" in reason, reason


@pytest.mark.parametrize("seed", range(2))
def test_a_size_won_by_a_clear_margin_keeps_its_own_backend(unique_name, seed):
    _, _, route = run(unique_name, close_call(0.4e-3, seed))
    assert served(route) == [(1, 2, "a"), (3, 32, "b")]


@pytest.mark.parametrize("seed", range(2))
def test_of_two_runtimes_within_the_margin_the_one_whose_drop_loses_least_goes(unique_name, seed):
    """a wins batch 1-2 by 5%, where eager is slowest; b wins 4-32 by 8%: keeping a would lose more."""
    eager = {1: 4e-3, 2: 4e-3, 4: 2e-3, 8: 2e-3, 16: 2e-3, 32: 2e-3}
    a = {1: 0.5e-3, 2: 0.5e-3, 4: 1.08e-3, 8: 1.08e-3, 16: 1.08e-3, 32: 1.08e-3}
    b = {1: 0.525e-3, 2: 0.525e-3, 4: 1e-3, 8: 1e-3, 16: 1e-3, 32: 1e-3}
    latencies = {EAGER: by_size(eager), named("a"): by_size(a), named("b"): by_size(b)}
    timer = ScriptedTimer(latencies, seed=seed, noise=0.03)
    module, report, route = run(unique_name, MaxThroughputStrategy(two_backends(), profile=SHORT_PROFILE, timer=timer))
    assert served(route) == [(1, 32, "b")]
    assert "one runtime serves them all" in rows_of(report)[named("a")].reason
    assert reaches(module, route, 1) == "b"


def three_way(max_backends: int) -> MaxThroughputStrategy:
    timer = ScriptedTimer({EAGER: 1e-3, **{named(label): by_size(times) for label, times in THREE.items()}})
    backends = [LabelBackend(label=label) for label in THREE]
    return MaxThroughputStrategy(backends, profile=PROFILE, timer=timer, max_backends=max_backends)


def test_without_a_cap_each_backend_serves_where_it_is_fastest(unique_name):
    _, _, route = run(unique_name, three_way(max_backends=3))
    assert served(route) == [(1, 2, "a"), (3, 8, "b"), (9, 32, "c")]


def test_max_backends_keeps_those_that_gain_most_and_gives_the_rest_to_the_best_kept(unique_name):
    """c gains least: its batches go to a, which still beats eager there (1.05x), not to eager."""
    module, report, route = run(unique_name, three_way(max_backends=2))
    assert served(route) == [(1, 2, "a"), (3, 8, "b"), (9, 32, "a")]
    assert len({id(b) for b in route.backends}) == 2
    rows = rows_of(report)
    assert rows[named("a")].serves == [(1, 2), (9, 32)]
    assert rows[named("c")].status == "passed"
    assert reaches(module, route, 16) == "a" and reaches(module, route, 4) == "b"


def test_a_dropped_winner_that_beats_eager_says_it_was_dropped_by_the_cap(unique_name):
    """c is the fastest at batch 16 and 32, and loses only to max_backends: its row must not say otherwise."""
    _, report, _ = run(unique_name, three_way(max_backends=2))
    reason = rows_of(report)[named("c")].reason
    assert "max_backends" in reason, reason


def test_max_backends_one_leaves_eager_where_the_kept_backend_is_slower(unique_name):
    module, report, route = run(unique_name, three_way(max_backends=1))
    assert served(route) == [(1, 2, "a"), (3, 8, "eager"), (9, 32, "a")]
    assert len(route.backends) == 1
    assert report.graphs[0].eager_serves == [(3, 8)]
    assert reaches(module, route, 4) == "eager" and reaches(module, route, 2) == "a"
    assert route.pick({"x": torch.randn(8, 16)}) is RUN_EAGERLY


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_max_backends_must_be_a_whole_number_of_at_least_one(value):
    with pytest.raises(ValueError, match="max_backends"):
        MaxThroughputStrategy([LabelBackend()], max_backends=value)
