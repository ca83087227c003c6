"""Refit: the OpenVINO backend takes the module's new weights without converting again.

Each test builds the backend on a small model whose BatchNorms the converter folds into
the convolutions, changes the model's weights as a user would (``load_state_dict`` from
a differently seeded copy), refits, and compares the backend with eager on the new weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext, RefitError
from aitune_core.testing.models import TinyCNN, cnn_call
from aitune_core.testing.recording import at_shape, record
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow


def _seeded_cnn(seed: int) -> TinyCNN:
    torch.manual_seed(seed)
    model = TinyCNN().eval()
    with torch.no_grad():  # a BatchNorm that is not the identity, so that a stale fold shows
        for norm in (model.features[1], model.features[5]):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return model


def _build(tmp_path: Path, **config: Any) -> tuple[BuildContext, OpenVINOBackend]:
    context = record(_seeded_cnn(0), cnn_call, (2, 4), tmp_path)
    return context, OpenVINOBackend(**config).build(context)


def _assert_serves_eager(backend: OpenVINOBackend, context: BuildContext, tolerance: float = 1e-5) -> None:
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            expected = context.module(*args, **kwargs)
        torch.testing.assert_close(backend(*args, **kwargs), expected, rtol=tolerance, atol=tolerance, msg=which)


def _constant_types(xml: Path) -> set[str]:
    import openvino as ov

    model = ov.Core().read_model(str(xml))
    return {
        node.get_element_type().get_type_name()
        for node in model.get_ordered_ops()
        if node.get_type_name() == "Constant"
    }


def test_refit_serves_the_new_weights(tmp_path: Path) -> None:
    context, backend = _build(tmp_path)
    assert backend.can_refit(), backend.refit_refusal
    assert "BatchNorm folded in" in backend.build_info["refit"]  # the converter folded both norms into the convs
    context.module.load_state_dict(_seeded_cnn(1).state_dict())
    args, _ = at_shape(context, "opt")
    with torch.no_grad():
        assert not torch.allclose(backend(*args), context.module(*args), atol=1e-3)  # the compiled IR is stale

    backend.refit(context.module)

    assert backend.state is BackendState.ACTIVE
    _assert_serves_eager(backend, context)


def test_refit_leaves_the_module_untouched(tmp_path: Path) -> None:
    context, backend = _build(tmp_path)
    model = context.module
    model.load_state_dict(_seeded_cnn(2).state_dict())
    model.features[1].train()
    before = {name: (tensor.clone(), tensor.data_ptr(), tensor._version) for name, tensor in model.state_dict().items()}
    modes = {name: module.training for name, module in model.named_modules()}

    backend.refit(model)

    after = model.state_dict()
    assert list(after) == list(before)
    for name, (value, pointer, version) in before.items():
        assert torch.equal(after[name], value) and after[name].data_ptr() == pointer, name
        assert after[name]._version == version, name
    assert {name: module.training for name, module in model.named_modules()} == modes


def test_a_changed_shape_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    context, backend = _build(tmp_path)
    args, _ = at_shape(context, "opt")
    served = backend(*args)
    context.module.features[4] = torch.nn.Conv2d(8, 16, 5, padding=2)

    with pytest.raises(RefitError, match=r"features\.4\.weight is \(16, 8, 5, 5\).*it was \(16, 8, 3, 3\).*rebuild"):
        backend.refit(context.module)
    torch.testing.assert_close(backend(*args), served, rtol=0, atol=0)  # what served before still serves


def test_a_checkpoint_after_a_refit_holds_the_new_weights(tmp_path: Path) -> None:
    context, backend = _build(tmp_path)
    context.module.load_state_dict(_seeded_cnn(3).state_dict())
    backend.refit(context.module)

    restored = OpenVINOBackend.from_dict(backend.to_dict())
    restored.deploy(context)

    _assert_serves_eager(restored, context)
    assert restored.can_refit()  # the map of its weights came along
    context.module.load_state_dict(_seeded_cnn(4).state_dict())
    restored.refit(context.module)
    _assert_serves_eager(restored, context)


def test_float16_weights_stay_float16(tmp_path: Path) -> None:
    context, backend = _build(tmp_path, compress_to_fp16=True)
    assert backend.can_refit(), backend.refit_refusal
    context.module.load_state_dict(_seeded_cnn(5).state_dict())

    backend.refit(context.module)

    artifacts = backend.to_dict()["artifacts"]
    assert "f16" in _constant_types(artifacts["ir_xml"])  # the stored compression is kept, not undone
    _assert_serves_eager(backend, context, tolerance=1e-2)


def test_a_backend_stored_without_a_weight_map_cannot_refit(tmp_path: Path) -> None:
    context, backend = _build(tmp_path)
    data = backend.to_dict()
    del data["extra"]["refit"]  # as stored before refit existed
    restored = OpenVINOBackend.from_dict(data)
    restored.deploy(context)

    assert not restored.can_refit()
    assert "without a map of its weights" in restored.refit_refusal
    with pytest.raises(RefitError, match="cannot take new weights without a rebuild"):
        restored.refit(context.module)
