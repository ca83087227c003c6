"""The Ray Serve application, real: the demo CNN tuned, saved and served over HTTP on 127.0.0.1.

One Ray of its own (``serve_locally``) with three CPUs serves the checkpoint for the whole
module, with one replica; tuned at two threads, the replica asks Ray for two CPUs.
Batches wait up to 20 s to fill, and every test that reaches the model sends exactly the
8 rows of the largest tuned batch at once: a batch then runs as soon as it is full, so
which requests share a call never depends on the machine's speed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serve_models import free_port, post, post_all, tuned_cnn_checkpoint
from torch import nn

from aitune_core.plugin_api import config
from aitune_ray.serving import LocalServer, ServeSettings, serve_locally

pytest.importorskip("starlette", reason="Ray Serve's HTTP libraries: pip install 'aitune-ray[serve]'")

pytestmark = pytest.mark.slow

WAIT_MS = 20_000.0
TUNED_THREADS = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, nn.Module]]:
    config.cache_dir = tmp_path_factory.mktemp("cache")
    folder = tmp_path_factory.mktemp("served") / "ckpt"
    checkpoint, eager = tuned_cnn_checkpoint(folder, "served_cnn_app", threads=TUNED_THREADS)
    settings = ServeSettings(str(checkpoint), "serve_models:build_cnn", max_wait_ms=WAIT_MS)
    with serve_locally(settings, free_port(), num_cpus=TUNED_THREADS + 1) as server:
        yield server, eager


def rows(count: int, size: int = 32) -> torch.Tensor:
    return torch.randn(count, 3, size, size)


def eager_outputs(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(inputs)


def served_calls(server: LocalServer) -> dict[str, Any]:
    stats = server.stats()
    return {key: stats[key] for key in ("requests", "rows", "model_calls")}


def test_answers_equal_eager_and_concurrent_requests_share_one_call(served: tuple[LocalServer, nn.Module]) -> None:
    server, eager = served
    inputs = [rows(1), rows(3), rows(4)]  # 8 rows: one full batch
    before = served_calls(server)
    answers = post_all(server.url, [{"inputs": [x.tolist()]} for x in inputs])
    after = served_calls(server)
    for x, (status, answer) in zip(inputs, answers, strict=True):
        assert status == 200, answer
        torch.testing.assert_close(torch.tensor(answer["outputs"]), eager_outputs(eager, x))
    assert after["requests"] - before["requests"] == 3 and after["rows"] - before["rows"] == 8
    assert after["model_calls"] - before["model_calls"] == 1  # three requests, one call of the tuned model
    assert server.stats()["largest_call_rows"] == 8


def test_eight_single_row_requests_are_answered_in_fewer_calls(served: tuple[LocalServer, nn.Module]) -> None:
    server, eager = served
    inputs = [rows(1) for _ in range(8)]
    before = served_calls(server)
    answers = post_all(server.url, [{"inputs": [x.tolist()]} for x in inputs])
    calls = served_calls(server)["model_calls"] - before["model_calls"]
    assert [status for status, _ in answers] == [200] * 8
    for x, (_, answer) in zip(inputs, answers, strict=True):
        torch.testing.assert_close(torch.tensor(answer["outputs"]), eager_outputs(eager, x))
    assert calls == 1


def test_a_request_the_model_cannot_take_fails_alone(served: tuple[LocalServer, nn.Module]) -> None:
    server, eager = served
    good = [rows(1) for _ in range(7)]
    bad = rows(1, size=31)  # the classifier's Linear expects 32x32 images
    answers = post_all(server.url, [{"inputs": [x.tolist()]} for x in [*good, bad]])
    status, answer = answers[-1]
    assert status == 422
    assert answer["error"].startswith("the model could not take these inputs: RuntimeError")
    for x, (status, answer) in zip(good, answers[:-1], strict=True):
        assert status == 200
        torch.testing.assert_close(torch.tensor(answer["outputs"]), eager_outputs(eager, x))


@pytest.mark.parametrize(
    ("payload", "method", "status", "says"),
    [
        (b"images please", "POST", 400, "the body is not JSON"),
        ({"images": [[1.0]]}, "POST", 400, 'must be a JSON object {"inputs": [x1, ...]}'),
        ({"inputs": [[[1.0, 2.0], [3.0]]]}, "POST", 400, "inputs[0] is not a rectangular array"),
        ({"inputs": [[[[[0.0] * 32] * 32] * 3] * 9]}, "POST", 413, "9 rows in one request, more than the 8"),
        (b"", "PUT", 405, "PUT is not served"),
    ],
)
def test_a_request_that_cannot_be_read_gets_a_clear_4xx(
    served: tuple[LocalServer, nn.Module], payload: Any, method: str, status: int, says: str
) -> None:
    server, _ = served
    before = served_calls(server)
    got, answer = post(server.url, payload, method=method)
    assert (got, says in answer["error"]) == (status, True), answer
    assert served_calls(server) == before  # answered before the batch queue: the model never saw it


def test_replicas_are_sized_from_the_tuning(served: tuple[LocalServer, nn.Module]) -> None:
    import ray

    server, _ = served
    status, stats = post(server.url, b"", method="GET")
    assert status == 200
    assert (stats["serving"], stats["max_batch_size"], stats["threads"]) == ("tuned", 8, TUNED_THREADS)
    assert stats["batch_wait_timeout_s"] == pytest.approx(WAIT_MS / 1000)
    assert server.setup.actor_options() == {"num_cpus": float(TUNED_THREADS)}
    assert ray.available_resources().get("CPU", 0.0) == pytest.approx(1.0)  # the replica holds two of the three


def test_the_server_listens_on_loopback_only(served: tuple[LocalServer, nn.Module]) -> None:
    import ray

    server, _ = served
    assert server.url.startswith("http://127.0.0.1:")
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}


def test_the_checkpoint_is_served_from_its_absolute_path(served: tuple[LocalServer, nn.Module]) -> None:
    server, _ = served
    assert Path(server.setup.checkpoint).is_absolute()
