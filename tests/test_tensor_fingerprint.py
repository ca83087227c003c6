"""The one tensor fingerprint: what the module guard, the staleness check and the load test guard compare."""

from __future__ import annotations

import torch

from aitune_core.guard.snapshot import fingerprint, same_storage, storage_of, version_of


def test_in_place_writes_move_the_version_and_new_data_moves_the_storage() -> None:
    weight = torch.ones(2, 3)
    before = fingerprint(weight)
    assert before == (0, weight.data_ptr(), torch.float32, torch.device("cpu"), torch.Size([2, 3]), (3, 1))
    weight.mul_(2)
    after = fingerprint(weight)
    assert after[0] == version_of(weight) == 1 and same_storage(before, after)
    weight.data = torch.zeros(2, 3)
    assert not same_storage(after, fingerprint(weight))
    assert not same_storage(after, fingerprint(weight.t()))  # same memory, seen through other strides


def test_tensors_without_a_version_or_a_storage_have_a_fingerprint_too() -> None:
    with torch.inference_mode():
        frozen = torch.ones(2)
    assert version_of(frozen) is None
    assert fingerprint(frozen) == (None, frozen.data_ptr(), torch.float32, torch.device("cpu"), torch.Size([2]), (1,))
    sparse = torch.eye(2).to_sparse()
    assert storage_of(sparse) is None
    assert fingerprint(sparse)[:2] == (0, None)
