"""Refit of engines built refittable, with ONNX Runtime standing in for TensorRT's refitter.

The stand-in engine (:class:`aitune_trt.testing.OrtEngine`) replaces its model's
initializers by name, as ``trt.Refitter.set_named_weights`` replaces an engine's weights
by the names the ONNX parser gave them. What is checked here is aitune-trt's side: which
weights are made from the module and under which names, what a refit refuses, and that
the plan written afterwards holds the new weights. test_gpu_refit.py runs real engines.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext, RefitError
from aitune_core.testing.models import TinyCNN, cnn_call
from aitune_core.testing.recording import at_shape, record
from aitune_trt import TensorRTBackend
from aitune_trt.backend import MODEL_FILE, NOT_REFITTABLE
from aitune_trt.runner import trt_dtype_name
from aitune_trt.testing import OrtEngine, OrtTensorRTBackend

pytestmark = pytest.mark.slow


def seeded_cnn(seed: int) -> TinyCNN:
    torch.manual_seed(seed)
    model = TinyCNN().eval()
    with torch.no_grad():  # BatchNorms that are not the identity, so that a stale fold shows
        for norm in (model.features[1], model.features[5]):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
    return model


@pytest.fixture
def built(tmp_path: Path) -> tuple[BuildContext, OrtTensorRTBackend]:
    context = record(seeded_cnn(0), cnn_call, (2, 4), tmp_path)
    return context, OrtTensorRTBackend(refittable=True).build(context)


def assert_serves_eager(backend: TensorRTBackend, context: BuildContext) -> None:
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            expected = context.module(*args, **kwargs)
        torch.testing.assert_close(backend(*args, **kwargs), expected, rtol=1e-4, atol=1e-5, msg=which)


def test_refit_sets_the_weights_the_parser_named_and_serves_eager(
    built: tuple[BuildContext, OrtTensorRTBackend],
) -> None:
    context, backend = built
    assert backend.last_options is not None and backend.last_options.refittable  # BuilderFlag.REFIT asked for
    assert backend.can_refit(), backend.refit_refusal
    assert "BatchNorm folded in" in backend.build_info["refit"]
    initializers = {item.name for item in onnx.load(str(context.cache_dir / MODEL_FILE)).graph.initializer}
    assert backend._weight_map is not None and set(backend._weight_map.constants) <= initializers

    context.module.load_state_dict(seeded_cnn(1).state_dict())
    args, _ = at_shape(context, "opt")
    with torch.no_grad():
        assert not torch.allclose(backend(*args), context.module(*args), atol=1e-3)  # the engine is stale
    backend.refit(context.module)

    assert backend.state is BackendState.ACTIVE
    assert isinstance(backend._session, OrtEngine) and backend._session.refits == 1
    assert_serves_eager(backend, context)


def test_the_plan_written_after_a_refit_holds_the_new_weights(
    built: tuple[BuildContext, OrtTensorRTBackend], tmp_path: Path
) -> None:
    context, backend = built
    first_plan = backend.plan_path
    context.module.load_state_dict(seeded_cnn(2).state_dict())
    backend.refit(context.module)
    assert backend.plan_path != first_plan and backend.plan_path is not None and backend.plan_path.is_file()

    restored = OrtTensorRTBackend.from_dict(backend.to_dict())
    restored.deploy(context)
    assert restored.can_refit()  # the map travels with the checkpoint
    assert_serves_eager(restored, context)

    context.module.load_state_dict(seeded_cnn(3).state_dict())  # and a second refit drops the first one's plan
    refitted = backend.plan_path
    backend.refit(context.module)
    assert not refitted.exists()
    assert_serves_eager(backend, context)


def test_a_shape_change_is_refused_naming_the_tensor(built: tuple[BuildContext, OrtTensorRTBackend]) -> None:
    context, backend = built
    context.module.head = torch.nn.Linear(context.module.head.in_features, 7)
    with pytest.raises(RefitError, match=r"head\.weight is \(7, "):
        backend.refit(context.module)


def test_engines_are_not_refittable_by_default(tmp_path: Path) -> None:
    context = record(seeded_cnn(0), cnn_call, (2,), tmp_path)
    backend = OrtTensorRTBackend().build(context)
    assert backend.last_options is not None and not backend.last_options.refittable
    assert not backend.can_refit() and backend.refit_refusal == NOT_REFITTABLE
    assert backend.build_info["refit"] == f"no: {NOT_REFITTABLE}"
    with pytest.raises(RefitError, match="cannot take new weights"):
        backend.refit(context.module)


@pytest.mark.parametrize(("dtype", "name"), [(torch.float32, "FLOAT"), (torch.float16, "HALF"), (torch.int64, "INT64")])
def test_weights_are_given_in_tensorrts_type_names(dtype: torch.dtype, name: str) -> None:
    assert trt_dtype_name(dtype) == name
