"""Selection on a busy machine: disturbed rounds are retaken, decided variants leave the race, far-above ones go on.

Every timing comes from :class:`ScriptedTimer`: its neighbours are bursts on a virtual
clock (busy for 0.05-0.4 s, then idle), which slow the calls that start inside them
1.5-5x, so that some rounds are slowed for both variants and some for one alone, as on a
real machine, and every verdict is the same on every machine.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest

from aitune_core.profiling.budget import current_budget, profiling_budget
from aitune_core.profiling.bursts import Bursts
from aitune_core.profiling.compare import BatchComparison, Variant, compare
from aitune_core.profiling.interference import disturbed_rounds
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer, TimedRound, Timer, WallClock
from aitune_core.validation.inputs import CallInputs

CALL = CallInputs("test", (), {})
GATE = 1.01
NEIGHBOURS = Bursts(busy_s=(0.05, 0.4), idle_s=(0.05, 0.4), slowdown=(1.5, 5.0))
"""Busy 0.05-0.4 s, then idle 0.3-1 s: 20-40% of the 83 ms rounds below are slowed."""
LATENCIES = {EAGER: 30e-3, "fast": 20e-3, "trap": 33e-3}
"""A backend truly 1.5x faster than eager, and a trap 10% slower."""
CAP_S = 60.0


def nothing(*args: Any, **kwargs: Any) -> None:
    return None


def variants(*names: str) -> list[Variant]:
    return [Variant(name, nothing) for name in (EAGER, *names)]


def pick(comparison: BatchComparison) -> str:
    """What ranking does at one size: the fastest variant whose interval clears the gate, else eager."""
    faster = [n for n in comparison.per_round if n != EAGER and comparison.speedup(n).verdict(GATE) == "faster"]
    return max(faster, key=lambda n: comparison.measurement(n).throughput) if faster else EAGER


def run(seed: int, load: Bursts, config: ProfileConfig | None = None) -> tuple[str, BatchComparison, ScriptedTimer]:
    timer = ScriptedTimer(LATENCIES, noise=0.03, load=load, seed=seed)
    with profiling_budget(CAP_S) as budget:
        comparison = compare(variants("fast", "trap"), CALL, 4, config or ProfileConfig(), timer, GATE)
    assert budget.spent_s <= CAP_S
    return pick(comparison), comparison, timer


# --------------------------------------------------------------------------- finding disturbed rounds
def test_a_round_with_far_less_cpu_than_usual_is_disturbed():
    shares = {EAGER: {0: 1.0, 1: 0.98, 2: 0.5, 3: 0.99, 4: 1.0}, "x": {0: 1.9, 1: 2.0, 2: 1.95, 3: 1.2, 4: 2.0}}
    found = disturbed_rounds(shares, threshold=0.85)
    assert set(found) == {2, 3}
    assert found[2] == pytest.approx(1.0 / 0.5) and found[3] == pytest.approx(2.0 / 1.2)


def test_steady_load_disturbs_nothing_and_unknown_shares_are_ignored():
    """A neighbour that never leaves: every round is alike, there is nothing to retake."""
    assert disturbed_rounds({EAGER: dict.fromkeys(range(8), 0.6)}, threshold=0.85) == {}
    assert disturbed_rounds({EAGER: dict.fromkeys(range(8), None)}, threshold=0.85) == {}
    assert disturbed_rounds({EAGER: {0: 1.0, 1: 0.1}}, threshold=0.85) == {}  # too few rounds to know "usual"


@pytest.mark.parametrize("visible", [True, False])
def test_scripted_bursts_slow_calls_and_show_in_cpu_time_only_when_visible(visible):
    load = Bursts(idle_s=(0.05, 0.05), busy_s=(0.05, 0.05), slowdown=(2, 2), visible=visible)
    timer = ScriptedTimer({EAGER: 10e-3}, load=load, seed=3)
    rounds = [timer.time_round(EAGER, nothing, CALL, 1, 1) for _ in range(40)]
    slowed = [r for r in rounds if r.latencies[0] == pytest.approx(20e-3)]
    assert len(slowed) == timer.slowed[EAGER] and 0 < len(slowed) < len(rounds)
    assert all(r.latencies[0] in (pytest.approx(10e-3), pytest.approx(20e-3)) for r in rounds)
    assert {round(r.cpu_share, 6) for r in slowed} == ({0.5} if visible else {1.0})
    assert timer.clock == pytest.approx(sum(r.latencies[0] for r in rounds))


def test_the_wall_clock_reports_the_cpu_time_a_call_got():
    """A call that sleeps gets next to no CPU time: what a preempted round looks like."""
    timed = WallClock().time_round(EAGER, lambda: time.sleep(0.02), CALL, 1, 2)
    assert len(timed.latencies) == 2 and timed.cpu_s is not None
    assert timed.cpu_share is not None and timed.cpu_share < 0.5


def test_a_pool_thread_running_on_another_core_counts_in_every_round_not_a_tick_late():
    """Short rounds beside a thread that never stops: each round's share is steady, as on a quiet machine.

    The process clock counted the other thread a scheduler tick late: 3 ms rounds read
    1.0 to 2.3 (more than two cores' worth), which flagged quiet rounds as preempted.
    """
    import itertools
    import statistics
    import threading

    import torch

    stop, started = threading.Event(), threading.Event()
    matrix = torch.randn(256, 256)

    def spin() -> None:
        torch.set_num_threads(1)  # one thread that never waits, whatever the pool would do between calls
        for done in itertools.count():
            if done == 200:  # its thread pool is up and running
                started.set()
            if stop.is_set():
                return
            torch.mm(matrix, matrix)

    threads = torch.get_num_threads()
    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    try:
        started.wait()
        shares = [WallClock().time_round(EAGER, lambda: time.sleep(0.003), CALL, 1, 1).cpu_share for _ in range(20)]
    finally:
        stop.set()
        worker.join()
        torch.set_num_threads(threads)
    known = [share for share in shares if share is not None]
    assert len(known) == 20
    typical = statistics.median(known)
    assert typical >= 0.8  # the other thread ran through the calls
    steady = [share for share in known if abs(share - typical) <= 0.2]
    assert len(steady) >= 17, " ".join(f"{share:.2f}" for share in known)  # a rare real preemption may dip


class SharesTimer(Timer):
    """Exact seconds and CPU shares per round, from given sequences (the first ``time`` of each is the probe)."""

    def __init__(self, seconds: dict[str, list[float]], shares: dict[str, list[float]]) -> None:
        self.seconds, self.shares = seconds, shares
        self.taken = dict.fromkeys(seconds, 0)

    def warm(self, name, fn, call, iterations):
        return None

    def time(self, name, fn, call, batch_size, calls):
        return [self.seconds[name][0]] * calls

    def time_round(self, name, fn, call, batch_size, calls):
        index = self.taken[name]
        self.taken[name] += 1
        value = self.seconds[name][index % len(self.seconds[name])]
        share = self.shares[name][index % len(self.shares[name])]
        return TimedRound([value] * calls, share * value * calls)


def test_disturbed_rounds_are_retaken_not_counted():
    """Every fourth round the candidate is preempted and looks slower than eager; those rounds are retaken."""
    timer = SharesTimer(
        {EAGER: [1e-3], "x": [0.8e-3, 0.8e-3, 0.8e-3, 2.0e-3]},
        {EAGER: [1.0], "x": [1.0, 1.0, 1.0, 0.4]},
    )
    config = ProfileConfig(min_rounds=8, min_time_s=0.0, max_time_s=1.0, round_time_s=1e-4, window=1)
    comparison = compare(variants("x"), CALL, 1, config, timer, GATE)
    assert comparison.retaken >= 2 and comparison.round_count >= 8
    assert max(comparison.rounds["x"]) == pytest.approx(0.8e-3)
    assert comparison.speedup("x").low == pytest.approx(1.25) and comparison.speedup("x").verdict(GATE) == "faster"


def test_retakes_are_bounded():
    """A neighbour that disturbs every other round cannot make the comparison run forever."""
    timer = SharesTimer({EAGER: [1e-3], "x": [0.8e-3, 2.0e-3]}, {EAGER: [1.0], "x": [1.0, 0.4]})
    config = ProfileConfig(min_rounds=8, min_time_s=0.0, max_time_s=0.0, max_retakes=3, round_time_s=1e-4, window=1)
    comparison = compare(variants("x"), CALL, 1, config, timer, GATE)
    assert comparison.retaken == 3 and comparison.round_count == 8


# --------------------------------------------------------------------------- the done-when: 20 seeds
@pytest.mark.parametrize(
    "load",
    [NEIGHBOURS, Bursts(busy_s=(0.05, 0.4), idle_s=(0.1, 0.5), visible=False)],
    ids=["preempted", "unseen-slowdown"],
)
def test_the_faster_backend_wins_and_the_trap_never_does_under_bursty_load(load):
    """Preemptions (seen in CPU time) are retaken; slowdowns CPU time cannot see are left to the sign test."""
    picks, slowed, timed = [], 0, 0
    for seed in range(20):
        chosen, comparison, timer = run(seed, load)
        picks.append(chosen)
        slowed += sum(timer.slowed.values())
        timed += sum(timer.timed.values())
        assert comparison.speedup("trap").verdict(GATE) != "faster", seed
    assert 0.2 <= slowed / timed <= 0.4  # the scripted neighbours slowed 20-40% of what was timed
    assert picks.count("fast") >= 19, picks
    assert "trap" not in picks


def test_a_quiet_machine_needs_no_retakes_and_stops_at_the_first_look():
    chosen, comparison, timer = run(0, Bursts(idle_s=(1e6, 1e6)))
    assert chosen == "fast" and comparison.retaken == 0
    assert comparison.round_count == ProfileConfig().min_rounds
    # the trap leaves the race at the first interval (5 rounds), and its rounds go to the others
    assert "trap" in comparison.outrun and timer.timed["trap"] == 1 + 5 < timer.timed[EAGER]


def test_a_far_faster_backend_is_measured_until_decided():
    """An uneven 1.33x candidate is slower than eager in 2 of 8 rounds: undecided at 8, measured on, then faster."""
    pattern = [0.8e-3, 1.6e-3, 2.1e-3, 1.0e-3, 1.4e-3, 1.8e-3, 1.2e-3, 2.05e-3]
    timer = SharesTimer({EAGER: [2e-3], "x": pattern}, {EAGER: [1.0], "x": [1.0]})
    config = ProfileConfig(min_rounds=8, min_time_s=0.0, max_time_s=0.0, round_time_s=1e-4, window=1)
    comparison = compare(variants("x"), CALL, 1, config, timer, GATE)
    assert comparison.round_count > 8 and comparison.outliers == comparison.retaken == 0
    assert comparison.speedup("x").verdict(GATE) == "faster"
    stopped = compare(
        variants("x"),
        CALL,
        1,
        attrs.evolve(config, max_rounds=8),
        SharesTimer({EAGER: [2e-3], "x": pattern}, {EAGER: [1.0], "x": [1.0]}),
        GATE,
    )
    assert stopped.round_count == 8 and stopped.speedup("x").verdict(GATE) == "undecided"  # what 8 rounds said


def test_near_the_gate_undecided_stays_undecided():
    """A candidate alternating 1.25x faster and slower is not far above the gate: no extra rounds."""
    timer = SharesTimer({EAGER: [1e-3], "x": [1e-3, 0.8e-3, 1.25e-3]}, {EAGER: [1.0], "x": [1.0]})
    config = ProfileConfig(min_rounds=8, min_time_s=0.0, max_time_s=0.0, round_time_s=1e-4, window=1)
    comparison = compare(variants("x"), CALL, 1, config, timer, GATE)
    assert comparison.round_count == 8 and comparison.speedup("x").verdict(GATE) == "undecided"


# --------------------------------------------------------------------------- the tune-wide cap
def test_a_spent_cap_stops_comparisons_at_the_fewest_rounds_for_an_interval():
    timer = ScriptedTimer({EAGER: 10e-3, "x": 9.9e-3}, noise=0.2, seed=1)
    with profiling_budget(0.01) as budget:
        assert current_budget() is budget
        comparison = compare(variants("x"), CALL, 1, ProfileConfig(), timer, GATE)
    assert current_budget() is None
    assert comparison.round_count == 5 and comparison.capped and budget.capped == 1
    assert budget.spent_s >= 0.01 and budget.describe().endswith("of 0 s")


def test_nested_budgets_share_the_outer_one():
    with profiling_budget(10.0) as outer, profiling_budget(1.0) as inner:
        assert inner is outer and current_budget() is outer
