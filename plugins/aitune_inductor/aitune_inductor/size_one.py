"""One compiled graph for a range that starts at 1, and the check that it may be trusted there.

Dynamo treats sizes 0 and 1 as special: a batch of 1 can broadcast, squeeze away or
pick another kernel, so a dynamic graph normally starts at 2 and a batch of 1 costs
a recompile. Tracing with ``backed_size_oblivious`` lets the range start at 1. Torch
still guards wherever it sees the difference (a convolution picks its kernel by batch
size, so a CNN keeps a graph of its own for batch 1), but some operations decide
size-obliviously and do not guard: ``x.squeeze()`` then keeps an axis of size 1 that
eager drops, and what follows may compute along another axis. Such a graph is wrong
only at size 1, so a build that shares the range compares what it returns there with
eager (as validation would, and before validation would reject the candidate for it),
and compiles the usual way on a mismatch.

Torch's compile caches do not key on ``backed_size_oblivious``: where the same graph
was compiled before with a range from 2 (tuned without batch 1 on the same
``TORCHINDUCTOR_CACHE_DIR``), the cached entry brings its guard back and batch 1
recompiles. That costs seconds, not correctness, and the build report shows it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def size_oblivious_available() -> bool:
    """Whether this torch can trace size-obliviously (older ones lack the option)."""
    from torch.fx.experimental import _config

    return hasattr(_config, "backed_size_oblivious")


@contextlib.contextmanager
def size_oblivious() -> Iterator[None]:
    """Trace with backed sizes that may be 1 without a guard that they are not."""
    from torch.fx.experimental import _config

    with _config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
        yield
