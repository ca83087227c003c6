"""The batch sizes that stand for a batch range: its ends and the powers of two between them.

Profiling sweeps them and validation checks them, so both read one definition.
"""

from __future__ import annotations


def sweep_batch_sizes(low: int, high: int) -> list[int]:
    """Powers of two from ``low`` to ``high``, with both ends included."""
    sizes = {low, high}
    size = 1
    while size < high:
        if size > low:
            sizes.add(size)
        size *= 2
    return sorted(sizes)
