"""The thread count a tune measures at, which must be the one its user serves at.

ONNX Runtime's and OpenVINO's thread pools, Inductor's OpenMP loops and eager torch all
scale differently with threads: a winner at one thread can lose at two. So candidates
are built, validated and timed at the count the user's process runs with (torch's own
setting when ``tune`` starts, unless ``tune(..., threads=N)`` says otherwise), and the
report and checkpoints record it, so that a load at another count can say so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def resolve_threads(threads: int | None) -> int:
    """``threads`` checked, or torch's own setting now when None."""
    if threads is None:
        return torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be a positive int or None (torch's own setting), got {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}; None takes torch.get_num_threads()")
    return threads


@contextmanager
def running_at(threads: int) -> Iterator[None]:
    """torch at ``threads`` inside, and back to the caller's setting after (even on error)."""
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def mismatch(tuned: int | None, now: int | None = None) -> str | None:
    """Why serving at ``now`` threads may not be what was measured at ``tuned``; None when they agree."""
    current = torch.get_num_threads() if now is None else now
    if tuned is None or tuned == current:
        return None
    return (
        f"tuned at {tuned} torch thread(s), running at {current}: the routes were timed at {tuned}, and a "
        f"winner there may lose here; call torch.set_num_threads({tuned}) before loading, or tune again "
        f"with tune(..., threads={current})"
    )
