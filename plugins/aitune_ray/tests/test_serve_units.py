"""The serving application's parts that need no Ray: its HTTP format, its sizing from the tuning, the factory.

What a replica runs with comes from the checkpoint's serving plan: the largest tuned batch,
the thread count, a GPU for CUDA graphs. Requests are decoded with a 4xx for what cannot
be served, stacked along axis 0 into one call and cut back per request.
"""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import pytest
import torch
from serve_models import tuned_cnn_checkpoint
from torch import nn

import aitune_core as ait
from aitune_core.plugin_api import CheckpointError, config
from aitune_ray.serving.factory import FactoryError, build_model
from aitune_ray.serving.settings import ServeSettings, replica_setup
from aitune_ray.serving.wire import BadRequest, Job, decode, encode, split, stack


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


def graph(max_batch: int | None, device: str = "cpu", batch_first: bool = True) -> ait.ServedGraph:
    return ait.ServedGraph("m", "0", device, None if max_batch is None else 1, max_batch, batch_first, ("every call",))


def plan(*graphs: ait.ServedGraph, threads: int | None = 1, native: bool = False) -> ait.ServingPlan:
    return ait.ServingPlan("ckpt", graphs, threads, native)


# --------------------------------------------------------------------------- the HTTP format
def test_a_request_is_decoded_into_tensors_with_the_batch_axis_first() -> None:
    job = decode(body({"inputs": [[[1.0, 2.0], [3.0, 4.0]], [[7], [8]]]}), max_rows=8)
    assert job.rows == 2
    assert job.inputs[0].dtype == torch.float32 and job.inputs[0].shape == (2, 2)
    assert job.inputs[1].dtype == torch.int64 and job.inputs[1].tolist() == [[7], [8]]


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        (b"{not json", 400, "not JSON"),
        (body([1, 2]), 400, '{"inputs": [x1, ...]}'),
        (body({"inputs": []}), 400, '{"inputs": [x1, ...]}'),
        (body({"inputs": [[1.0]], "extra": 1}), 400, "unknown field(s) 'extra'"),
        (body({"inputs": [[[1.0, 2.0], [3.0]]]}), 400, "inputs[0] is not a rectangular array"),
        (body({"inputs": [3.0]}), 400, "inputs[0] must be a tensor"),
        (body({"inputs": [["a"]]}), 400, "inputs[0] is not a rectangular array"),
        (body({"inputs": [[1.0, 2.0], [1.0]]}), 400, "same number of rows (axis 0); got 2, 1"),
        (body({"inputs": [[[1.0]] * 9]}), 413, "9 rows in one request, more than the 8"),
    ],
)
def test_a_request_that_cannot_be_served_gets_a_4xx_naming_why(payload: bytes, status: int, says: str) -> None:
    with pytest.raises(BadRequest) as raised:
        decode(payload, max_rows=8)
    assert raised.value.status == status
    assert says in raised.value.message


def test_stacked_requests_are_cut_back_into_each_ones_rows() -> None:
    jobs = [Job((torch.full((rows, 2), float(rows)),), rows) for rows in (1, 3, 2)]
    (stacked,) = stack(jobs)
    assert stacked.shape == (6, 2)
    outputs = {"y": stacked * 2, "pair": (stacked[:, :1], "tag")}
    parts = split(outputs, [1, 3, 2])
    for job, part in zip(jobs, parts, strict=True):
        torch.testing.assert_close(part["y"], job.inputs[0] * 2)
        torch.testing.assert_close(part["pair"][0], job.inputs[0][:, :1])
        assert part["pair"][1] == "tag"
    assert encode(parts[0]) == {"y": [[2.0, 2.0]], "pair": [[[1.0]], "tag"]}


def test_an_output_without_a_row_per_input_row_is_not_cut() -> None:
    with pytest.raises(ValueError, match=r"no axis 0 of the batch's 3 rows"):
        split(torch.zeros(4), [1, 2])


def test_float32_answers_read_back_exactly() -> None:
    values = torch.randn(64, dtype=torch.float32)
    assert torch.equal(torch.tensor(json.loads(json.dumps(encode(values)))), values)


# --------------------------------------------------------------------------- sizing from the tuning
def test_replicas_are_sized_from_what_tuning_measured() -> None:
    setup = replica_setup(ServeSettings("ckpt", "m:f", max_wait_ms=3), plan(graph(8), graph(16), threads=2))
    assert setup.max_batch_size == 16  # the largest batch tuning built and validated for
    assert setup.batch_wait_timeout_s == pytest.approx(0.003)
    assert setup.threads == 2 and setup.actor_options() == {"num_cpus": 2.0}
    assert setup.max_ongoing_requests() >= setup.max_batch_size
    assert setup.device_map is None


def test_a_cuda_graph_asks_for_a_gpu() -> None:
    setup = replica_setup(ServeSettings("ckpt", "m:f"), plan(graph(4, device="cuda"), threads=None))
    assert setup.actor_options() == {"num_cpus": 1.0, "num_gpus": 1.0}
    assert setup.device_map == "cuda" and setup.threads is None


def test_the_users_choices_win_over_the_tuning() -> None:
    setup = replica_setup(ServeSettings("ckpt", "m:f", max_batch=2, threads=3), plan(graph(8)))
    assert (setup.max_batch_size, setup.threads, setup.num_cpus) == (2, 3, 3.0)


def test_graphs_that_cannot_be_stacked_are_served_one_request_at_a_time() -> None:
    assert (
        replica_setup(ServeSettings("ckpt", "m:f"), plan(graph(None), graph(8, batch_first=False))).max_batch_size == 1
    )


def test_native_code_is_loaded_only_when_trusted() -> None:
    with pytest.raises(ValueError, match="--trust-native-code"):
        replica_setup(ServeSettings("ckpt", "m:f"), plan(graph(8), native=True))
    assert replica_setup(ServeSettings("ckpt", "m:f", trust_native_code=True), plan(graph(8), native=True))


@pytest.mark.parametrize("field", ["replicas", "max_batch", "threads"])
def test_settings_refuse_counts_below_one(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be at least 1"):
        ServeSettings("ckpt", "m:f", **{field: 0})


# --------------------------------------------------------------------------- the factory and loading
@pytest.mark.parametrize(
    ("reference", "says"),
    [
        ("serve_models.build_cnn", "must be MODULE:FUNCTION"),
        ("no_such_module_here:build", "cannot import 'no_such_module_here'"),
        ("serve_models:missing", "'serve_models' has no 'missing'"),
        ("serve_models:SIZES", "is a list, not a function"),
        ("serve_models:not_a_model", "returned a dict; it must return the torch.nn.Module"),
    ],
)
def test_a_factory_that_builds_no_model_is_named_with_the_fix(reference: str, says: str) -> None:
    with pytest.raises(FactoryError) as raised:
        build_model(reference)
    assert says in str(raised.value)


@pytest.fixture(scope="module")
def cnn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module]:
    config.cache_dir = tmp_path_factory.mktemp("cache")
    return tuned_cnn_checkpoint(tmp_path_factory.mktemp("units") / "ckpt", "served_cnn_units")


@pytest.mark.slow
def test_a_replica_loads_the_tuned_routes_or_with_eager_the_models_own_forward(
    cnn_checkpoint: tuple[Path, nn.Module],
) -> None:
    pytest.importorskip("starlette", reason="Ray Serve's HTTP libraries: pip install 'aitune-ray[serve]'")
    from aitune_ray.serving.app import load_model

    checkpoint, eager = cnn_checkpoint
    tuned_plan = ait.serving_plan(checkpoint)
    setup = replica_setup(ServeSettings(str(checkpoint), "serve_models:build_cnn"), tuned_plan)
    assert setup.max_batch_size == 8 and setup.threads == 1
    eager_setup = replica_setup(ServeSettings(str(checkpoint), "serve_models:build_cnn", eager=True), tuned_plan)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        tuned = load_model(setup)
        assert isinstance(tuned, ait.Module)
        torch.testing.assert_close(tuned(x), eager(x))
        del tuned  # one loaded module of a name per process
        gc.collect()
        served_eager = load_model(eager_setup)
        assert not any(isinstance(module, ait.Module) for module in served_eager.modules())
        torch.testing.assert_close(served_eager(x), eager(x), rtol=0, atol=0)  # the checkpoint's weights, eagerly


@pytest.mark.slow
def test_a_damaged_checkpoint_is_refused_before_anything_starts(
    cnn_checkpoint: tuple[Path, nn.Module], tmp_path: Path
) -> None:
    checkpoint = Path(shutil.copytree(cnn_checkpoint[0], tmp_path / "ckpt"))
    assert ait.serving_plan(checkpoint).max_batch == 8
    weights = next(path for path in sorted(checkpoint.rglob("weights*")) if path.is_file())
    altered = bytearray(weights.read_bytes())
    altered[len(altered) // 2] ^= 0xFF
    weights.write_bytes(bytes(altered))
    with pytest.raises(CheckpointError, match="sha256"):
        ait.serving_plan(checkpoint)
