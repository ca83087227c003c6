"""The Ray executor on a local two-CPU Ray: same winner as in-process, dead workers are failed rows."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ray_backends import (
    FAST_PROFILE,
    AbortBackend,
    ArtifactBackend,
    HangBackend,
    OtherArtifactBackend,
    SkipDelayBackend,
    SlowDemoMLP,
)

import aitune_core as ait
from aitune_core import BackendState, TorchEagerBackend, TuneReport
from aitune_core.testing.engine import capture, executor_names, get_executor_class, mlp_samples
from aitune_ray import RayExecutor
from aitune_ray import executor as ray_executor
from aitune_ray.artifacts import unpack_artifacts

pytestmark = pytest.mark.slow
TIMEOUT_S = 8  # counted from when a worker takes the candidate; a healthy one needs a second or two


def candidates() -> list[ait.Backend]:
    """Eager, eager under bf16 autocast (too far from float32 eager: rejected), and a clearly faster one."""
    return [
        TorchEagerBackend(),
        TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16),
        SkipDelayBackend(),
    ]


def tune(
    module: ait.Module, backends: list[ait.Backend], executor: Any, strategy: type[ait.TuneStrategy] | None = None
) -> TuneReport:
    chosen = (strategy or ait.MaxThroughputStrategy)(backends, profile=FAST_PROFILE)
    return ait.tune(module, mlp_samples(4), batch_sizes=[1, 2], strategy=chosen, executor=executor)


def rows(report: TuneReport) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def test_ray_picks_the_in_process_winner_and_survives_dead_workers(
    local_ray: Any, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    here = ait.Module(SlowDemoMLP().eval(), unique_name("here"))
    local = tune(here, candidates(), "inprocess")

    puts: list[object] = []
    real_put = local_ray.put
    monkeypatch.setattr(local_ray, "put", lambda value, **kw: puts.append(value) or real_put(value, **kw))
    model = SlowDemoMLP().eval()
    remote_module = ait.Module(model, unique_name("ray"))
    executor = RayExecutor(timeout_s=TIMEOUT_S)
    with capture() as events:
        remote = tune(remote_module, [*candidates(), AbortBackend(), HangBackend()], executor)
    executor.close()

    assert remote.selected(remote_module.name) == local.selected(here.name) == "SkipDelayBackend()"
    local_rows, remote_rows = rows(local), rows(remote)
    for name, row in local_rows.items():
        assert remote_rows[name].status == row.status, name
    assert remote_rows["TorchEagerBackend(autocast_enabled=True,autocast_dtype=torch.bfloat16)"].status == "rejected"
    aborted, hung = remote_rows["AbortBackend()"], remote_rows["HangBackend()"]
    assert aborted.status == "failed" and aborted.reason.startswith("worker died")
    host = socket.gethostname()
    assert aborted.worker.endswith(f"@{host}") and hung.worker.endswith(f"@{host}")  # named though they died
    assert (hung.status, hung.reason) == ("failed", f"timed out after {TIMEOUT_S} s")
    assert len(puts) == 1  # module, samples and graph spec went to the object store once for five candidates

    winner_row = remote_rows["SkipDelayBackend()"]
    assert winner_row.worker.endswith(f"@{host}") and winner_row.worker != f"{os.getpid()}@{host}"  # not here
    # Built and validated on the workers; timed here, every candidate beside eager under the same conditions.
    validated = [e for e in events if e["event"] == "validated"]
    assert validated and all(e["worker"].endswith(f"@{host}") for e in validated)
    compared = [e for e in events if e["event"] == "compared"]
    assert compared and not any("worker" in e for e in compared)
    assert "Worker" in remote.summary() and winner_row.worker in remote.summary()

    winner = remote_module.backends["0"]
    assert isinstance(winner, SkipDelayBackend) and winner.state is BackendState.ACTIVE
    x = torch.randn(2, 512)
    torch.testing.assert_close(remote_module(x), model(x))

    # The checkpoints name the same backend, config and state whichever executor tuned.
    def backend_entry(module: ait.Module, folder: str) -> dict[str, Any]:
        ait.save(module, tmp_path / folder)
        manifest = json.loads((tmp_path / folder / "manifest.json").read_text())
        entry = manifest["modules"][0]["graphs"][0]["backend"]
        return {key: entry[key] for key in ("name", "config", "state", "is_jit", "description")}

    assert backend_entry(remote_module, "ray") == backend_entry(here, "here")


def test_aot_winner_artifacts_come_back_through_the_object_store(
    local_ray: Any, unique_name: Callable[[str], str]
) -> None:
    model = SlowDemoMLP().eval()
    module = ait.Module(model, unique_name())
    report = tune(module, [ArtifactBackend()], RayExecutor(workers=1), ait.FirstWinsStrategy)
    row = report.graphs[0].candidates[0]
    assert row.status == "selected" and row.worker.endswith(f"@{socket.gethostname()}")
    winner = module.backends["0"]
    assert isinstance(winner, ArtifactBackend) and winner.loaded_from is not None
    assert winner.loaded_from.is_relative_to(ait.config.cache_dir.absolute() / "builds")  # written here, from bytes
    x = torch.randn(2, 512)
    torch.testing.assert_close(module(x), model(x))


def test_fetched_artifacts_are_the_drivers_build_folders_and_go_when_nothing_serves_from_them(
    local_ray: Any, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ait.config.cache_dir.expanduser().absolute()
    builds = cache / "builds"
    # A driver that fetched a winner's files and then died: they are named after its pid, now gone.
    code = (
        "import sys; from pathlib import Path; from aitune_ray.artifacts import unpack_artifacts; "
        "print(unpack_artifacts({'weights': ('builds/id/7-ab/weights.pt', b'0' * 1000)}, Path(sys.argv[1]))['weights'])"
    )
    ran = subprocess.run([sys.executable, "-c", code, str(builds)], check=True, capture_output=True, text=True)
    left = Path(ran.stdout.strip())
    assert left.is_file() and left.parent.parent == builds / "id"

    fetched: list[Path] = []

    def unpack(packed: Any, root: Path) -> dict[str, str]:
        paths = unpack_artifacts(packed, root)
        fetched.extend(Path(path).parent for path in paths.values())
        return paths

    monkeypatch.setattr(ray_executor, "unpack_artifacts", unpack)
    model = SlowDemoMLP().eval()
    module = ait.Module(model, unique_name())
    report = tune(module, [ArtifactBackend(), OtherArtifactBackend()], RayExecutor(workers=1))
    assert report.selected(module.name) == "ArtifactBackend()"  # as fast as the other (timed by the test's timer)
    assert rows(report)["OtherArtifactBackend()"].status == "passed"  # fetched here too, and timed

    assert not left.parent.exists()  # the next run removed what the gone driver left
    winner = module.backends["0"]
    assert isinstance(winner, ArtifactBackend) and winner.loaded_from is not None
    folder = winner.loaded_from.parent
    assert folder in fetched and len(fetched) == 2  # both passed, so both were fetched
    assert all(path.parent.parent == builds and path.name.startswith(f"{os.getpid()}-") for path in fetched)
    (loser,) = set(fetched) - {folder}
    assert not loser.exists()  # nothing serves from it once the tune is done
    assert not (cache / module.name).exists()  # nothing went outside the parts the cache sizes
    x = torch.randn(2, 512)
    torch.testing.assert_close(module(x), model(x))
    del module, winner, report
    gc.collect()
    assert not folder.exists()  # the tuned module went, and its folder with it


def test_ray_is_chosen_by_name_through_the_plugin(local_ray: Any, unique_name: Callable[[str], str]) -> None:
    if "ray" not in executor_names():
        pytest.skip("aitune-ray is not installed (its entry point registers the executor)")
    assert get_executor_class("ray") is RayExecutor
    ait.config.executor = "ray"
    module = ait.Module(SlowDemoMLP().eval(), unique_name())
    report = tune(module, [SkipDelayBackend()], None, ait.FirstWinsStrategy)
    assert report.selected(module.name) == "SkipDelayBackend()"
    assert local_ray.is_initialized()  # a Ray started by the caller is left running
