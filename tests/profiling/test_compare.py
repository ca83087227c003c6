"""Comparing variants in interleaved rounds: the statistics, when rounds stop, and what is left out.

No timing here comes from the clock: :class:`ScriptedTimer` gives latencies with seeded
noise, and :class:`RoundTimer` gives an exact latency for each round, so every count and
every verdict below is the same on every machine.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from aitune_core.profiling.compare import EARLY_STOP_CONFIDENCE, MAX_ROUNDS, Variant, compare
from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
from aitune_core.profiling.stats import Speedup, outlier_rounds, paired_speedup, rounds_for_an_interval, spread
from aitune_core.profiling.timer import EAGER, ScriptedTimer, Timer
from aitune_core.validation.inputs import CallInputs

CALL = CallInputs("test", (), {})
GATE = 1.01
CONFIG = ProfileConfig(warmup_iterations=1, window=4, min_rounds=5, min_time_s=0.0, max_time_s=0.1, round_time_s=0.004)
ROOMY = ProfileConfig(warmup_iterations=1, window=4, min_rounds=5, min_time_s=0.0, max_time_s=1.0, round_time_s=0.004)
"""A budget that one slow round cannot spend."""


def nothing(*args: Any, **kwargs: Any) -> None:
    return None


def variants(*names: str) -> list[Variant]:
    return [Variant(name, nothing) for name in (EAGER, *names)]


class RoundTimer(Timer):
    """Each ``time()`` of a variant takes the next latency of its sequence (cycled), for every call of it.

    The first ``time()`` of each variant is the probe that sizes the rounds; ``spent``
    adds up what the rounds took after it, as ``compare`` counts it.
    """

    def __init__(self, sequences: dict[str, list[float]]) -> None:
        self.sequences = sequences
        self.taken: dict[str, int] = {name: 0 for name in sequences}
        self.calls: list[int] = []
        self.spent: list[float] = []
        """Measured seconds after each round-part (the probes left out)."""

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        return None

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        sequence = self.sequences[name]
        value = sequence[self.taken[name] % len(sequence)]
        probe = self.taken[name] == 0
        self.taken[name] += 1
        if not probe:
            self.calls.append(calls)
            self.spent.append((self.spent[-1] if self.spent else 0.0) + value * calls)
        return [value] * calls


# --------------------------------------------------------------------------- paired_speedup
def test_constant_rounds_give_an_exact_speedup():
    speedup = paired_speedup([2e-3] * 10, [1e-3] * 10, confidence=0.9)
    assert speedup == Speedup(2.0, 2.0, 2.0)
    assert speedup.verdict(GATE) == "faster" and speedup.describe() == "2.00x [2.00-2.00]"


def test_load_shared_by_a_round_cancels_out():
    """Rounds slowed for both sides alike (another job, a clock change) leave the paired interval exact."""
    load = [1.0, 3.0, 1.2, 0.7, 5.0, 1.0, 2.2, 0.9]
    reference = [1e-3 * factor for factor in load]
    candidate = [0.5e-3 * factor for factor in load]
    speedup = paired_speedup(reference, candidate, confidence=0.9)
    assert speedup.low == pytest.approx(2.0) and speedup.high == pytest.approx(2.0)


def test_the_interval_is_deterministic_and_holds_the_point():
    rng = random.Random(7)
    for _ in range(20):
        count = rng.randrange(3, 30)
        reference = [1e-3 * (1 + 0.2 * rng.random()) for _ in range(count)]
        candidate = [0.9e-3 * (1 + 0.2 * rng.random()) for _ in range(count)]
        first = paired_speedup(reference, candidate, confidence=0.9)
        assert first == paired_speedup(list(reference), list(candidate), confidence=0.9)
        assert first.low <= first.median <= first.high
        assert first.median == pytest.approx(statistics.median(reference) / statistics.median(candidate))


def test_a_wider_confidence_never_gives_a_narrower_interval():
    rng = random.Random(3)
    reference = [1e-3 * (1 + 0.1 * rng.gauss(0, 1)) for _ in range(25)]
    candidate = [0.95e-3 * (1 + 0.1 * rng.gauss(0, 1)) for _ in range(25)]
    narrow = paired_speedup(reference, candidate, confidence=0.5)
    wide = paired_speedup(reference, candidate, confidence=0.99)
    assert wide.low <= narrow.low and wide.high >= narrow.high


def test_too_few_rounds_say_nothing():
    speedup = paired_speedup([2e-3, 2e-3], [1e-3, 1e-3], confidence=0.9)
    assert speedup.median == 2.0 and speedup.low == 0.0 and speedup.high == float("inf")
    assert speedup.verdict(GATE) == "undecided"


@pytest.mark.parametrize("reference, candidate", [([], []), ([1.0, 1.0], [1.0])])
def test_rounds_must_pair_up(reference, candidate):
    with pytest.raises(ValueError, match="same, non-zero number of rounds"):
        paired_speedup(reference, candidate, confidence=0.9)


@pytest.mark.parametrize(
    "speedup, verdict",
    [
        (Speedup(1.2, 1.05, 1.3), "faster"),
        (Speedup(1.02, GATE, 1.03), "faster"),  # the low end on the gate clears it
        (Speedup(0.9, 0.85, 0.95), "slower"),
        (Speedup(1.0, 0.99, GATE), "undecided"),  # the high end on the gate does not rule it out
        (Speedup(1.0, 0.9, 1.1), "undecided"),
    ],
)
def test_verdicts_against_the_gate(speedup, verdict):
    assert speedup.verdict(GATE) == verdict


# --------------------------------------------------------------------------- outliers and spread
def test_one_round_fifty_times_slower_is_an_outlier():
    rounds = [1.0, 1.01, 0.99, 1.02, 50.0, 1.0, 0.98, 1.01]
    assert outlier_rounds(rounds) == {4}


def test_steady_or_merely_noisy_rounds_are_all_kept():
    assert outlier_rounds([1e-3] * 12) == set()
    rng = random.Random(1)
    assert outlier_rounds([1e-3 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(50)]) == set()


def test_too_few_rounds_to_call_one_an_outlier():
    assert outlier_rounds([1.0, 1.0, 1.0, 50.0]) == set()


def test_spread_is_p90_over_p50():
    assert spread([1.0] * 10) == 1.0
    assert spread([1.0] * 5 + [2.0] * 5) == pytest.approx(2.0 / 1.5)


# --------------------------------------------------------------------------- compare
FIRST_LOOK = max(CONFIG.min_rounds, rounds_for_an_interval(EARLY_STOP_CONFIDENCE))
"""The first round count at which an early stop can be decided (7 at 98%)."""


def test_a_clear_difference_stops_at_the_first_look():
    timer = ScriptedTimer({EAGER: 1e-3, "fast": 0.5e-3, "slow": 2e-3})
    comparison = compare(variants("fast", "slow"), CALL, 4, CONFIG, timer, GATE)
    assert comparison.round_count == FIRST_LOOK
    assert comparison.speedup("fast").verdict(GATE) == "faster"
    assert comparison.speedup("slow").verdict(GATE) == "slower"
    assert comparison.speedup("fast", over="slow").median == pytest.approx(4.0)
    per_round = 2  # ceil(round_time_s / the slowest variant's 2 ms)
    # "slow" leaves the race once an interval can say it is slower (5 rounds at 90%): its rounds go to the others
    raced = rounds_for_an_interval(CONFIG.confidence)
    assert timer.timed == {
        EAGER: 1 + per_round * FIRST_LOOK,
        "fast": 1 + per_round * FIRST_LOOK,
        "slow": 1 + per_round * raced,
    }
    assert comparison.outrun.keys() == {"slow"} and "slower than eager" in comparison.outrun["slow"]
    assert comparison.measurement("fast") == Measurement.of([0.5e-3] * (per_round * FIRST_LOOK), 4)
    assert comparison.measurement(EAGER).throughput == pytest.approx(4 / 1e-3)


def test_min_time_keeps_a_decided_comparison_going():
    config = ProfileConfig(window=4, min_rounds=5, min_time_s=0.05, max_time_s=1.0, round_time_s=0.004)
    timer = RoundTimer({EAGER: [1e-3], "fast": [0.5e-3]})
    comparison = compare(variants("fast"), CALL, 4, config, timer, GATE)
    # every round spends 4 ms of eager and 2 ms of "fast": the first past 50 ms is the 9th
    assert 9 <= comparison.round_count < 20 and timer.spent[-1] >= config.min_time_s
    assert comparison.speedup("fast").verdict(GATE) == "faster"


def test_an_undecided_comparison_runs_until_the_budget_is_spent():
    """Rounds alternate between 1.25x faster and 1.25x slower than eager: no interval can clear the gate."""
    timer = RoundTimer({EAGER: [1e-3], "x": [0.8e-3, 1.25e-3]})
    comparison = compare(variants("x"), CALL, 4, CONFIG, timer, GATE)
    speedup = comparison.speedup("x")
    assert speedup.verdict(GATE) == "undecided" and speedup.low < 1.0 and speedup.high > GATE
    assert rounds_for_an_interval(0.9) < comparison.round_count < MAX_ROUNDS
    assert timer.spent[-1] >= CONFIG.max_time_s > timer.spent[-3]  # the last round went past the budget


def test_only_the_deciding_variants_are_waited_for():
    """A copy of eager (here "twin") can never be decided against it, so rounds do not wait for it."""
    timer = RoundTimer({EAGER: [1e-3], "twin": [0.8e-3, 1.25e-3], "fast": [0.5e-3]})
    waited = compare(variants("twin", "fast"), CALL, 4, CONFIG, timer, GATE, deciding=["fast"])
    assert waited.round_count == FIRST_LOOK
    # not waited for, but timed as long as the race goes on, so that its own row is not luck
    assert timer.taken["twin"] == timer.taken[EAGER]
    timer = RoundTimer({EAGER: [1e-3], "twin": [0.8e-3, 1.25e-3]})
    assert compare(variants("twin"), CALL, 4, CONFIG, timer, GATE).round_count > FIRST_LOOK


def test_a_single_huge_outlier_round_does_not_change_the_verdict():
    """One 50x round of the candidate (a GC pause) is left out for every variant; the verdict stands."""
    timer = RoundTimer({EAGER: [1e-3], "x": [0.9e-3] * 3 + [45e-3] + [0.9e-3] * 100})
    comparison = compare(variants("x"), CALL, 4, ROOMY, timer, GATE)
    assert comparison.outliers == 1
    assert max(comparison.rounds["x"]) == pytest.approx(0.9e-3)
    assert len(comparison.rounds[EAGER]) == len(comparison.rounds["x"])
    assert comparison.speedup("x").verdict(GATE) == "faster"
    assert comparison.speedup("x").median == pytest.approx(1 / 0.9)


def test_an_outlier_round_of_eager_does_not_make_a_copy_look_faster():
    timer = RoundTimer({EAGER: [1e-3] * 2 + [50e-3] + [1e-3] * 100, "twin": [1e-3]})
    comparison = compare(variants("twin"), CALL, 4, ROOMY, timer, GATE)
    assert comparison.outliers == 1
    assert comparison.speedup("twin") == Speedup(1.0, 1.0, 1.0)
    assert comparison.speedup("twin").verdict(GATE) == "slower"


def test_calls_per_round_adapt_to_the_slowest_variant():
    fast_only = ScriptedTimer({EAGER: 0.1e-3, "x": 0.05e-3})
    comparison = compare(variants("x"), CALL, 1, CONFIG, fast_only, GATE)
    assert len(comparison.calls["x"]) == CONFIG.window * comparison.round_count  # capped at the window
    with_slow = ScriptedTimer({EAGER: 0.1e-3, "x": 0.05e-3, "slow": 3e-3})
    comparison = compare(variants("x", "slow"), CALL, 1, CONFIG, with_slow, GATE)
    assert len(comparison.calls["x"]) == 2 * comparison.round_count  # ceil(4 ms / 3 ms)
    very_slow = ScriptedTimer({EAGER: 0.1e-3, "slow": 50e-3})
    comparison = compare(variants("slow"), CALL, 1, CONFIG, very_slow, GATE)
    assert len(comparison.calls[EAGER]) == comparison.round_count  # never fewer than one call


def test_every_round_times_every_variant_in_a_rotated_order():
    order: list[str] = []

    class Recording(ScriptedTimer):
        def time_round(self, name, fn, call, batch_size, calls):
            order.append(name)
            return super().time_round(name, fn, call, batch_size, calls)

    compare(variants("a", "b"), CALL, 1, CONFIG, Recording({EAGER: 1e-3, "a": 0.5e-3, "b": 1.2e-3}), GATE)
    rounds = [order[i : i + 3] for i in range(3, len(order), 3)]  # the probes first
    assert rounds[:3] == [[EAGER, "a", "b"], ["a", "b", EAGER], ["b", EAGER, "a"]]


@pytest.mark.parametrize("names", [(EAGER, "x", "x"), ("x", "y")])
def test_variants_need_unique_names_and_the_reference(names):
    with pytest.raises(ValueError, match="unique names"):
        compare([Variant(name, nothing) for name in names], CALL, 1, CONFIG, ScriptedTimer({}, default=1e-3), GATE)


def test_another_reference_may_be_named():
    timer = ScriptedTimer({"base": 1e-3, "x": 0.5e-3})
    comparison = compare(
        [Variant("base", nothing), Variant("x", nothing)], CALL, 1, CONFIG, timer, GATE, reference="base"
    )
    assert comparison.reference == "base" and comparison.speedup("x").median == pytest.approx(2.0)


def test_two_copies_of_eager_are_rarely_called_different():
    """Equal latencies under realistic noise: a 90% interval may call one faster in at most ~5% of seeds.

    The rounds of a 1.8 ms call hold three calls each, the default budget allows some
    twenty rounds, and the verdict is looked at after each of them.
    """
    faster = [
        seed
        for seed in range(100)
        if compare(
            variants("twin"),
            CALL,
            16,
            ProfileConfig(),
            ScriptedTimer({EAGER: 1.8e-3, "twin": 1.8e-3}, noise=0.05, outlier_rate=0.02, seed=seed),
            GATE,
        )
        .speedup("twin")
        .verdict(GATE)
        == "faster"
    ]
    assert len(faster) <= 5, faster


# --------------------------------------------------------------------------- measure
def test_measure_stops_once_the_median_settles():
    config = ProfileConfig(window=8, min_time_s=0.05, max_time_s=1.0)
    timer = ScriptedTimer({"x": 2e-3})
    measurement = measure(nothing, CALL, config, batch_size=4, timer=timer, name="x")
    assert measurement.median_ms == pytest.approx(2.0) and measurement.p90_ms == pytest.approx(2.0)
    assert measurement.throughput == pytest.approx(4 / 2e-3)
    # settled from the second window on; 50 ms of measurement take four windows of 16 ms
    assert measurement.iterations == 32 and timer.timed == {"x": 32}
    assert measurement.duration_s == pytest.approx(0.064)


def test_measure_gives_up_at_the_time_budget():
    config = ProfileConfig(window=8, min_time_s=0.2, max_time_s=0.2)
    timer = ScriptedTimer({EAGER: 1e-3}, noise=0.3, seed=2)
    measurement = measure(nothing, CALL, config, batch_size=1, timer=timer)
    assert timer.timed == {EAGER: measurement.iterations}
    assert config.max_time_s <= measurement.duration_s < config.max_time_s + 8 * 1e-3 * 2.5
    assert measurement.iterations % config.window == 0


def test_measurement_of_uses_the_median_it_is_given():
    measurement = Measurement.of([1e-3, 2e-3, 3e-3, 10e-3], batch_size=2, median=2e-3)
    assert measurement.median_ms == pytest.approx(2.0) and measurement.p90_ms == pytest.approx(10.0)
    assert measurement.throughput == pytest.approx(1000.0) and measurement.iterations == 4


def test_rounds_are_timed_once_the_caches_hold_the_variant():
    """The first calls after another variant ran refill the caches (scripted: 2, 1 and 0.3 ms more).

    Timed, they weigh more on a fast variant than on a slow one, and squeeze every
    speedup towards 1; the settling calls before each round leave them out.
    """
    latencies = {EAGER: 1e-3, "same": 1e-3, "fast": 0.6e-3}
    cold = (2e-3, 1e-3, 0.3e-3)
    config = ProfileConfig(window=8, min_rounds=5, min_time_s=0.0, max_time_s=1.0, round_time_s=0.012)
    settled = compare(variants("same", "fast"), CALL, 1, config, ScriptedTimer(latencies, cold=cold), GATE)
    assert settled.speedup("fast").median == pytest.approx(1 / 0.6)
    assert settled.speedup("same").median == pytest.approx(1.0)
    assert settled.measurement("fast").median_ms == pytest.approx(0.6)
    unsettled_config = attrs.evolve(config, settle_calls=0)
    unsettled = compare(variants("same", "fast"), CALL, 1, unsettled_config, ScriptedTimer(latencies, cold=cold), GATE)
    assert unsettled.speedup("fast").median < 0.95 / 0.6
    assert unsettled.measurement("fast").median_ms > 0.6


def test_slow_calls_get_one_settling_call():
    """A round of one call is preceded by one untimed call: the first after another variant woke its pool.

    Scripted: the first call after a switch takes 12 ms more (a pool woken from sleep,
    caches refilled). Timed, it would make a 2x faster backend look slower than eager.
    """
    timer = ScriptedTimer({EAGER: 20e-3, "x": 10e-3}, cold=(12e-3,))
    comparison = compare(variants("x"), CALL, 1, CONFIG, timer, GATE)
    assert timer.timed == {EAGER: 1 + comparison.round_count, "x": 1 + comparison.round_count}
    assert comparison.measurement("x").median_ms == pytest.approx(10.0)
    assert comparison.speedup("x").verdict(GATE) == "faster"
