"""tune() with OpenVINO among the candidates: validated against eager at the default tolerances, routed, serving.

The timer is scripted (every candidate twice as fast as eager), so which candidate
serves never depends on the machine's load; what is real is the build, the validation
against eager at the recorded shapes and their extremes, and the outputs served.
"""

from __future__ import annotations

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyCNN, TinyEncoder, cnn_call, encoder_call
from aitune_core.testing.timing import steady_timer
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow

PROFILE = ait.ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.005, max_time_s=0.03, max_batch_search=False)


def tune(model: torch.nn.Module, dataset: list, name: str, **options: object) -> tuple[ait.Module, object]:
    wrapped = ait.Module(model, name)
    strategy = ait.MaxThroughputStrategy([OpenVINOBackend(), ait.TorchEagerBackend()], profile=PROFILE)
    return wrapped, ait.tune(wrapped, dataset, strategy=strategy, **options)


def test_the_cnn_is_validated_routed_and_served() -> None:
    ait.config.timer = steady_timer()
    torch.manual_seed(0)
    model = TinyCNN().eval()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    wrapped, report = tune(model, [cnn_call(1)[0][0][0] for _ in range(8)], "openvino-cnn", batch_sizes=[1, 4])
    (row,) = [c for c in report.graphs[0].candidates if c.backend == "OpenVINOBackend()"]
    assert row.status == "selected" and row.serves == [(1, 4)], (row.status, row.reason)
    assert row.max_abs_error is not None and row.max_abs_error < 1e-5
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, OpenVINOBackend)
    with torch.no_grad():
        for batch in (1, 3, 4):
            (x,), _ = cnn_call(batch)
            torch.testing.assert_close(wrapped(x), model(x))
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())
    assert not model.training


def test_the_encoder_keeps_its_threads_from_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO's inference threads are torch's when the model compiles, so the comparison is fair."""
    ait.config.timer = steady_timer()
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    wrapped, report = tune(TinyEncoder().eval(), [encoder_call(2, length)[1] for length in (8, 16)], "openvino-enc")
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, OpenVINOBackend), report.graphs[0].candidates
    assert route.backend.compiled.threads == threads == route.backend.build_info["threads"]
