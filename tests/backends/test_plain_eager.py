"""One test of "is this backend the module's own forward?", which strategies, routes and partitioning share."""

from __future__ import annotations

import torch

from aitune_core.backends import TorchEagerBackend
from aitune_core.backends.eager import is_plain_eager


def test_only_eager_without_autocast_is_plain_eager() -> None:
    assert is_plain_eager(TorchEagerBackend())
    assert not is_plain_eager(TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16))
    assert not is_plain_eager(None)
    assert not is_plain_eager(object())
