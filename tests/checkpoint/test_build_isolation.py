"""Builds are private to the candidate that made them, and ``save`` writes only what was validated."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from weight_file_backend import WeightFileBackend

import aitune_core as ait
from aitune_core.backends.artifacts import seal_of
from aitune_core.checkpoint.save import save
from aitune_core.config import config
from aitune_core.errors import CheckpointError
from aitune_core.testing.fake_dists import write_fake_dist
from aitune_core.testing.timing import FAST_PROFILE

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# One tuning job: tune a model under the shared module name, tell the other job, wait
# for it as the test orders, then save, with what the tuned model returns.
JOB = """
import sys
import time
from pathlib import Path

import torch

import aitune_core as ait
from aitune_core.checkpoint.save import save
from aitune_core.profiling import ProfileConfig
from weight_file_backend import WeightFileBackend

seed, folder, wait_to_tune, tuned, wait_to_save = sys.argv[1:]
folder = Path(folder)


def wait(name):
    deadline = time.monotonic() + 240
    while name != "-" and not (folder / name).exists():
        assert time.monotonic() < deadline, f"gave up waiting for {name}"
        time.sleep(0.05)


def model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


torch.manual_seed(int(seed))
tuned_model = model()
wrapped = ait.Module(tuned_model, "shared")
wait(wait_to_tune)
fast = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.01, max_batch_search=False)
strategy = ait.FirstWinsStrategy([WeightFileBackend()], profile=fast).enable_performance_validation(False)
ait.tune(wrapped, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
(folder / tuned).touch()
wait(wait_to_save)
save(wrapped, folder / f"ckpt-{seed}")
x = torch.randn(2, 8)  # inside the tuned batch range, so the backend serves it
with torch.no_grad():
    torch.save({"x": x, "y": tuned_model(x)}, folder / f"expected-{seed}.pt")
print("built in", wrapped.backends["0"].context.cache_dir)
"""


# A fresh process loads one job's checkpoint into a model with other weights.
CHECK = """
import sys

import torch

from aitune_core.checkpoint.load import load

folder, seed = sys.argv[1:]
torch.manual_seed(999)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
restored = load(model, f"{folder}/ckpt-{seed}")
expected = torch.load(f"{folder}/expected-{seed}.pt", weights_only=True)
assert type(restored.backends["0"]).__name__ == "WeightFileBackend"
with torch.no_grad():
    served = restored(expected["x"])
assert torch.equal(served, expected["y"]), f"the checkpoint of job {seed} serves other numbers than its model"
print("ok")
"""


def _environment(tmp_path: Path) -> dict[str, str]:
    dist = write_fake_dist(
        tmp_path / "dists", "aitune-test-weight-file", entry_points={"weight_file": "weight_file_backend"}
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    paths = [str(ROOT), str(HERE), str(dist.path)]
    environ.update(
        PYTHONPATH=os.pathsep.join(paths), AITUNE_CACHE_DIR=str(tmp_path / "shared-cache"), OMP_NUM_THREADS="1"
    )
    return environ


@pytest.mark.slow  # child processes and their limits
def test_two_jobs_sharing_a_cache_and_a_module_name_each_save_their_own_build(tmp_path: Path) -> None:
    """Job A tunes, job B tunes other weights under the same name, then A saves: A's checkpoint is A's."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    environ = _environment(tmp_path)

    def start(seed: int, wait_to_tune: str, tuned: str, wait_to_save: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(script), str(seed), str(tmp_path), wait_to_tune, tuned, wait_to_save]
        return subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start(1, "-", "a-tuned", "b-tuned")
    second = start(2, "a-tuned", "b-tuned", "-")
    outputs = [job.communicate(timeout=300) for job in (first, second)]
    for job, (_, err) in zip((first, second), outputs, strict=True):
        assert job.returncode == 0, err[-3000:]
    (tmp_path / "check.py").write_text(textwrap.dedent(CHECK))
    for seed in (1, 2):
        check = [sys.executable, str(tmp_path / "check.py"), str(tmp_path), str(seed)]
        loaded = subprocess.run(check, env=environ, capture_output=True, text=True, timeout=300)
        assert loaded.returncode == 0 and loaded.stdout.strip().endswith("ok"), loaded.stderr[-3000:]
    folders = [out.strip().rsplit("built in ", 1)[-1] for out, _ in outputs]
    assert folders[0] != folders[1]
    assert all(Path(folder).is_relative_to(tmp_path / "shared-cache" / "builds") for folder in folders)


def _tuned(name: str) -> ait.Module:
    module = ait.Module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), name)
    strategy = ait.FirstWinsStrategy([WeightFileBackend()], profile=FAST_PROFILE).enable_performance_validation(False)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    return module


def test_an_artifact_changed_after_validation_is_refused_by_save(tmp_path: Path, unique_name) -> None:  # type: ignore[no-untyped-def]
    name = unique_name("engine")
    module = _tuned(name)
    backend = module.backends["0"]
    assert isinstance(backend, WeightFileBackend) and backend.weights is not None
    sealed = seal_of(backend)
    assert sealed is not None and set(sealed.artifacts) == {"weights"}
    validated = sealed.artifacts["weights"].sha256
    torch.save({"overwritten": torch.zeros(3)}, backend.weights)

    with pytest.raises(CheckpointError) as refused:
        save(module, tmp_path / "ckpt")
    message = str(refused.value)
    assert f"module `{name}`" in message and "graph `0`" in message and "WeightFileBackend" in message
    assert "'weights'" in message and validated in message and "changed after the candidate was validated" in message
    assert not (tmp_path / "ckpt").exists()


def test_each_candidate_builds_in_a_folder_of_its_own(unique_name) -> None:  # type: ignore[no-untyped-def]
    first, second = _tuned(unique_name("same")), _tuned(unique_name("same"))
    folders = [module.backends["0"].context.cache_dir for module in (first, second)]
    assert folders[0] != folders[1]
    assert all(folder.parent.parent == config.cache_dir / "builds" for folder in folders)
    # different weights, same graph and backend: different identities
    assert folders[0].parent.name != folders[1].parent.name
