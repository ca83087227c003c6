"""``aitune serve``: what it refuses before starting anything, and a whole run, from start to Ctrl-C.

The whole run is the command a user types, in a process of its own: it prints the URL,
answers on 127.0.0.1, and on SIGINT stops Serve and its Ray and exits 0, leaving the
port closed.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_models import free_port, post, tuned_cnn_checkpoint

import aitune_core as ait
from aitune_core.plugin_api import config
from aitune_ray.serving.command import serve_command
from aitune_ray.serving.launch import ServeError, _check_room
from aitune_ray.serving.settings import ReplicaSetup

HERE = Path(__file__).resolve().parent
START_BOUND_S = 300.0
"""How long a start may take before the test gives up (a bound against hanging, not a verdict)."""


@pytest.fixture(scope="module")
def eager_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    config.cache_dir = tmp_path_factory.mktemp("cache")
    folder = tmp_path_factory.mktemp("command") / "ckpt"
    return tuned_cnn_checkpoint(folder, "served_cnn_command", ait.TorchEagerBackend())


def test_a_factory_that_cannot_be_imported_stops_before_ray_starts(
    eager_checkpoint: tuple[Path, torch.nn.Module], capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    code = serve_command(checkpoint=str(eager_checkpoint[0]), factory="no_such_pkg.models:build", port=free_port())
    assert code == 1
    assert "aitune serve: cannot import 'no_such_pkg.models' for the factory" in capsys.readouterr().err
    assert not ray.is_initialized()


def test_a_port_in_use_is_refused_before_ray_starts(
    eager_checkpoint: tuple[Path, torch.nn.Module], capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = serve_command(checkpoint=str(eager_checkpoint[0]), factory="serve_models:build_cnn", port=port)
    assert code == 1
    assert f"aitune serve: cannot serve on 127.0.0.1:{port}: Address already in use" in capsys.readouterr().err
    assert not ray.is_initialized()


def test_a_missing_checkpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_command(checkpoint=str(tmp_path / "nothing"), factory="serve_models:build_cnn", port=1) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("aitune serve: no checkpoint at") and "\n" not in error


class _Cluster:
    def __init__(self, **resources: float) -> None:
        self.resources = resources

    def cluster_resources(self) -> dict[str, float]:
        return self.resources


def setup(num_cpus: float, num_gpus: float = 0.0) -> ReplicaSetup:
    return ReplicaSetup("ckpt", "m:f", 8, 0.005, None, num_cpus, num_gpus, None, False, False)


def test_replicas_that_cannot_all_be_placed_are_refused_with_the_fix() -> None:
    _check_room(_Cluster(CPU=2.0), [(setup(1.0), 2)])
    with pytest.raises(ServeError, match=r"3 replica\(s\) need 3 CPUs.*has 2: ask for fewer --replicas"):
        _check_room(_Cluster(CPU=2.0), [(setup(1.0), 2), (setup(1.0), 1)])
    with pytest.raises(ServeError, match="tuned on CUDA: 1 replica"):
        _check_room(_Cluster(CPU=2.0), [(setup(1.0, num_gpus=1.0), 1)])


@pytest.mark.slow
def test_a_replica_that_cannot_build_the_model_is_reported_with_its_error(
    eager_checkpoint: tuple[Path, torch.nn.Module], capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    code = serve_command(checkpoint=str(eager_checkpoint[0]), factory="serve_models:not_a_model", port=free_port())
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after Ray's own log lines
    assert code == 1
    assert said.startswith("aitune serve: the application did not start")
    assert "returned a dict; it must return the torch.nn.Module that was tuned" in said
    assert not ray.is_initialized()


def _lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)
    into.put("")


@pytest.mark.slow
def test_the_command_serves_on_loopback_until_ctrl_c(eager_checkpoint: tuple[Path, torch.nn.Module]) -> None:
    checkpoint, eager = eager_checkpoint
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # the command keeps Ray on loopback by itself
    command = [sys.executable, "-m", "aitune_core.cli", "serve", str(checkpoint), "--factory", "serve_models:build_cnn"]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--max-wait-ms", "1"],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ctrl-C reaches it alone, as from its own terminal
    )
    output: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(server.stdout, output), daemon=True).start()
    printed: list[str] = []
    try:
        while not any(line.startswith("Serving at") for line in printed):
            line = output.get(timeout=START_BOUND_S)
            assert line, "the command ended before serving:\n" + "".join(printed)
            printed.append(line)
        url = f"http://127.0.0.1:{port}/"
        assert f"Serving at {url}" in "".join(printed)
        assert "batches of up to 8 rows" in "".join(printed)
        x = torch.randn(2, 3, 32, 32)
        status, answer = post(url, {"inputs": [x.tolist()]})
        assert status == 200
        with torch.no_grad():
            torch.testing.assert_close(torch.tensor(answer["outputs"]), eager(x))

        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=START_BOUND_S) == 0
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    while (line := output.get(timeout=START_BOUND_S)) != "":
        printed.append(line)
    assert "Stopped." in "".join(printed)
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))
