"""Build folders: named after what was built from, never shared."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from aitune_core.backends.build_folders import builds_root, claim_build_folder, weights_fingerprint
from aitune_core.config import config


class Scope:
    """Stands for tune()'s module guard: what the fingerprint is remembered for."""


def test_the_weights_fingerprint_follows_the_values_names_and_dtypes() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    same = copy.deepcopy(model)
    assert weights_fingerprint(model) == weights_fingerprint(same)
    with torch.no_grad():
        same[0].weight[0, 0] += 1e-6
    assert weights_fingerprint(model) != weights_fingerprint(same)
    assert weights_fingerprint(model) != weights_fingerprint(copy.deepcopy(model).to(torch.bfloat16))
    assert len(weights_fingerprint(nn.Linear(4, 4, device="meta"))) == 64


def test_the_fingerprint_is_computed_once_per_scope() -> None:
    model = nn.Linear(4, 4)
    scope = Scope()
    first = weights_fingerprint(model, scope)
    with torch.no_grad():
        model.weight.zero_()  # inside one scope the guard puts such writes back; the memo holds
    assert weights_fingerprint(model, scope) == first
    assert weights_fingerprint(model, Scope()) != first


def test_two_claims_of_one_identity_get_two_folders(tmp_path: Path) -> None:
    first, second = claim_build_folder(tmp_path, "abc"), claim_build_folder(tmp_path, "abc")
    assert first != second and first.parent == second.parent == tmp_path / "abc"
    assert first.is_dir() and not any(first.iterdir())


def test_builds_go_to_the_cache_or_to_a_workers_own_folder(tmp_path: Path) -> None:
    config.cache_dir = tmp_path / "cache"
    assert builds_root(tmp_path / "cache" / "module" / "0") == (tmp_path / "cache" / "builds").absolute()
    assert builds_root(tmp_path / "worker") == (tmp_path / "worker" / "builds").absolute()
