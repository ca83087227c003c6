"""Finding the rounds that a neighbour disturbed, from how long the process waited for a CPU.

The direct sign is the time this process's threads spent runnable but not running
(:mod:`aitune_core.profiling.runqueue`): about nothing in a quiet round, a large part of
the round when a neighbour held a core. A round is disturbed when a variant waited
``WAIT_MARGIN`` of its wall time more than it usually does ("usually": a low quantile of
its own rounds, so that a load that never leaves flags nothing).

Where that is unknown (kernels without schedstats), the CPU share stands in: a round in
which this process was preempted shows it too, its wall time running on while the
process gets no CPU time, though less clearly with a thread pool whose other threads
spin through it. Each variant's share of CPU per wall second is steady on a quiet
machine (about 1 for one thread, more for a backend with a thread pool), so a round
whose share falls well below that variant's usual share was disturbed, whatever the
backend's own speed. The share is read from each thread's own clock
(:mod:`aitune_core.profiling.cpu_time`): the process clock counts a pool thread up to a
scheduler tick late, and at two threads on resnet18 it flagged half of the quiet
rounds at batch 1, using up every retake on noise.

Disturbed rounds are retaken rather than counted: one of them out of a few would
otherwise decide a verdict.

For the share, "usual" is a high quantile of the variant's own rounds, not its maximum, so that one
round with an unusual burst of helper-thread CPU does not make every other round look
disturbed; and if the neighbours never leave, the usual share is the loaded one, and
nothing is flagged: there is no quiet round to wait for, and the pairing of rounds is
then what keeps the comparison fair.

Slowness alone is not taken as a sign: leaving out a variant's slow rounds would favour
a backend whose own latency is uneven (fast in some rounds, far slower in others) over
one that is steadily a little faster, and a trap would win. A slowdown that CPU time
cannot see (a neighbour saturating memory bandwidth) is left to the pairing of rounds
and the sign test.
"""

from __future__ import annotations

from collections.abc import Mapping

USUAL_QUANTILE = 0.75
"""Which of a variant's CPU shares counts as its usual one (its 75th percentile)."""
QUIET_QUANTILE = 0.25
"""Which of a variant's run-queue waits counts as its usual one (its 25th percentile)."""
WAIT_MARGIN = 0.1
"""A round is disturbed when a variant waited this share of its wall time more than usual.
Quiet rounds of resnet18 at two threads waited 0 (median) and at most 0.08; slowed ones 0.57."""
MIN_ROUNDS = 3
"""A variant needs this many rounds before any of them can be called disturbed."""


def disturbed_rounds(
    shares: Mapping[str, Mapping[int, float | None]],
    threshold: float,
    waits: Mapping[str, Mapping[int, float | None]] | None = None,
) -> dict[int, float]:
    """Round index -> how disturbed its worst variant was (above 1.0; higher is worse).

    shares: per variant, each round's CPU seconds per wall second (None: unknown).
    threshold: without waits, a round is disturbed when a variant's share is below
        ``threshold`` times its usual share.
    waits: per variant, each round's run-queue seconds per wall second (None: unknown);
        a variant with enough known waits is judged on them instead of its shares.
    """
    found: dict[int, float] = {}
    for name, by_round in shares.items():
        waited = _known((waits or {}).get(name, {}))
        if len(waited) >= MIN_ROUNDS:
            _by_waits(waited, found)
        else:
            _by_shares(_known(by_round), threshold, found)
    return found


def _known(values: Mapping[int, float | None]) -> dict[int, float]:
    return {index: value for index, value in values.items() if value is not None}


def _by_waits(waited: dict[int, float], found: dict[int, float]) -> None:
    ordered = sorted(waited.values())
    usual = ordered[int(QUIET_QUANTILE * (len(ordered) - 1))]
    for index, wait in waited.items():
        if wait > usual + WAIT_MARGIN:
            found[index] = max(found.get(index, 1.0), (1.0 + wait) / (1.0 + usual))


def _by_shares(known: dict[int, float], threshold: float, found: dict[int, float]) -> None:
    if len(known) < MIN_ROUNDS:
        return
    ordered = sorted(known.values())
    usual = ordered[min(len(ordered) - 1, int(USUAL_QUANTILE * len(ordered)))]
    if usual <= 0:
        return
    for index, share in known.items():
        if share < threshold * usual:
            found[index] = max(found.get(index, 1.0), usual / share if share > 0 else float("inf"))
