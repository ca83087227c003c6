"""Scripted neighbours: bursts of load on a virtual clock, for testing selection on a busy machine.

A shared machine is not uniformly slower; neighbours come and go. Here they are
busy for a while, then idle for a while (each duration drawn from a range), and a
call that starts while they are busy takes ``slowdown`` times longer. Whether the
process's CPU time shows it decides whether interference detection can see it:
preemption by a neighbour leaves the wall clock running while this process gets no
CPU (visible), while memory-bandwidth or thermal slowdowns take CPU time too
(invisible), and only the statistics can protect a verdict from them.
"""

from __future__ import annotations

import random

import attrs


@attrs.frozen
class Bursts:
    """How the scripted neighbours behave; see the module docstring.

    busy_s, idle_s: ranges (seconds of the virtual clock) the busy and idle stretches are drawn from.
    slowdown: range of the factor a busy stretch slows calls by (drawn once per stretch).
    visible: the process's CPU time shows the slowdown (a preemption), so that
        interference detection can find the round.
    """

    busy_s: tuple[float, float] = (0.05, 0.4)
    idle_s: tuple[float, float] = (0.05, 0.4)
    slowdown: tuple[float, float] = (1.5, 5.0)
    visible: bool = True

    def __attrs_post_init__(self) -> None:
        for name in ("busy_s", "idle_s", "slowdown"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"Bursts.{name} must be a range 0 < low <= high, got {(low, high)}")


class BurstSchedule:
    """The busy stretches of one seeded run, drawn as the virtual clock reaches them."""

    def __init__(self, bursts: Bursts, rng: random.Random) -> None:
        self.bursts = bursts
        self._rng = rng
        self._stretches: list[tuple[float, float, float]] = []
        """``(start, end, factor)`` of each busy stretch drawn so far, in order."""
        # A run starts anywhere in the neighbours' cycle, not always at the start of an idle stretch.
        self._drawn_to = -rng.uniform(0.0, bursts.idle_s[1] + bursts.busy_s[1])

    def factor_at(self, moment: float) -> float:
        """How much slower a call starting at ``moment`` runs: 1.0 while the neighbours are idle."""
        while self._drawn_to <= moment:
            start = self._drawn_to + self._rng.uniform(*self.bursts.idle_s)
            end = start + self._rng.uniform(*self.bursts.busy_s)
            self._stretches.append((start, end, self._rng.uniform(*self.bursts.slowdown)))
            self._drawn_to = end
        for start, end, factor in reversed(self._stretches):
            if start <= moment < end:
                return factor
            if end <= moment:
                break
        return 1.0
