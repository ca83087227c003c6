"""Finding the rounds that a neighbour disturbed, from how much CPU time the process got.

A round in which this process was preempted shows it: its wall time runs on while the
process gets no CPU time. Each variant's share of CPU per wall second is steady on a
quiet machine (about 1 for one thread, more for a backend with a thread pool), so a
round whose share falls well below that variant's usual share was disturbed, whatever
the backend's own speed. Such rounds are retaken rather than counted: one disturbed
round out of a few would otherwise decide a verdict.

"Usual" is a high quantile of the variant's own rounds, not its maximum, so that one
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
MIN_ROUNDS = 3
"""A variant needs this many rounds before any of them can be called disturbed."""


def disturbed_rounds(shares: Mapping[str, Mapping[int, float | None]], threshold: float) -> dict[int, float]:
    """Round index -> how far its worst variant fell below its usual CPU share (1.0: not at all).

    shares: per variant, each round's CPU seconds per wall second (None: unknown).
    threshold: a round is disturbed when a variant's share is below ``threshold`` times
        its usual share; only those rounds are returned, the most disturbed highest.
    """
    found: dict[int, float] = {}
    for by_round in shares.values():
        known = {index: share for index, share in by_round.items() if share is not None}
        if len(known) < MIN_ROUNDS:
            continue
        ordered = sorted(known.values())
        usual = ordered[min(len(ordered) - 1, int(USUAL_QUANTILE * len(ordered)))]
        if usual <= 0:
            continue
        for index, share in known.items():
            if share < threshold * usual:
                found[index] = max(found.get(index, 1.0), usual / share if share > 0 else float("inf"))
    return found
