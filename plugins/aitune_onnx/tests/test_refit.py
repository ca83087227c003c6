"""Refit: the ONNX Runtime backend takes the module's new weights without exporting again.

Each test builds the backend on a small model, changes the model's weights as a user
would (``load_state_dict`` from a differently seeded copy), refits, and compares the
backend with eager on the new weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext, RefitError
from aitune_core.testing.models import TinyCNN, cnn_call, mlp_call
from aitune_core.testing.recording import at_shape, record
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow


def _seeded_cnn(seed: int) -> TinyCNN:
    torch.manual_seed(seed)
    model = TinyCNN().eval()
    with torch.no_grad():  # a BatchNorm that is not the identity, so that a stale fold shows
        for norm in (model.features[1], model.features[5]):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return model


@pytest.fixture
def cnn(tmp_path: Path) -> tuple[BuildContext, ONNXRuntimeBackend]:
    context = record(_seeded_cnn(0), cnn_call, (2, 4), tmp_path)
    return context, ONNXRuntimeBackend().build(context)


def _assert_serves_eager(backend: ONNXRuntimeBackend, context: BuildContext) -> None:
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            expected = context.module(*args, **kwargs)
        torch.testing.assert_close(backend(*args, **kwargs), expected, rtol=1e-4, atol=1e-5, msg=which)


def test_refit_serves_the_new_weights(cnn: tuple[BuildContext, ONNXRuntimeBackend]) -> None:
    context, backend = cnn
    assert backend.can_refit(), backend.refit_refusal
    assert "BatchNorm folded in" in backend.build_info["refit"]  # the exporter folded both norms into the convs
    context.module.load_state_dict(_seeded_cnn(1).state_dict())
    args, _ = at_shape(context, "opt")
    with torch.no_grad():
        assert not torch.allclose(backend(*args), context.module(*args), atol=1e-3)  # the session is stale

    backend.refit(context.module)

    assert backend.state is BackendState.ACTIVE
    _assert_serves_eager(backend, context)


def test_refit_leaves_the_module_untouched(cnn: tuple[BuildContext, ONNXRuntimeBackend]) -> None:
    context, backend = cnn
    model = context.module
    model.load_state_dict(_seeded_cnn(2).state_dict())
    model.features[1].train()  # a submodule in another mode than its parent keeps it
    before = {name: (tensor.clone(), tensor.data_ptr(), tensor._version) for name, tensor in model.state_dict().items()}
    modes = {name: module.training for name, module in model.named_modules()}

    backend.refit(model)

    after = model.state_dict()
    assert list(after) == list(before)
    for name, (value, pointer, version) in before.items():
        assert torch.equal(after[name], value) and after[name].data_ptr() == pointer, name
        assert after[name]._version == version, name
    assert {name: module.training for name, module in model.named_modules()} == modes


def test_a_changed_shape_is_refused_naming_the_tensor(cnn: tuple[BuildContext, ONNXRuntimeBackend]) -> None:
    context, backend = cnn
    args, _ = at_shape(context, "opt")
    served = backend(*args)
    context.module.head = torch.nn.Linear(256, 12)

    with pytest.raises(RefitError, match=r"head\.weight is \(12, 256\).*it was \(10, 256\).*rebuild"):
        backend.refit(context.module)
    torch.testing.assert_close(backend(*args), served, rtol=0, atol=0)  # what served before still serves


def test_a_checkpoint_after_a_refit_holds_the_new_weights(cnn: tuple[BuildContext, ONNXRuntimeBackend]) -> None:
    context, backend = cnn
    context.module.load_state_dict(_seeded_cnn(3).state_dict())
    backend.refit(context.module)

    restored = ONNXRuntimeBackend.from_dict(backend.to_dict())
    restored.deploy(context)

    _assert_serves_eager(restored, context)
    assert restored.can_refit()  # the map of its weights came along
    context.module.load_state_dict(_seeded_cnn(4).state_dict())
    restored.refit(context.module)
    _assert_serves_eager(restored, context)


def test_a_backend_stored_without_a_weight_map_cannot_refit(cnn: tuple[BuildContext, ONNXRuntimeBackend]) -> None:
    context, backend = cnn
    data = backend.to_dict()
    del data["extra"]["refit"]  # as stored before refit existed
    restored = ONNXRuntimeBackend.from_dict(data)
    restored.deploy(context)

    assert not restored.can_refit()
    assert "without a map of its weights" in restored.refit_refusal
    with pytest.raises(RefitError, match="cannot take new weights without a rebuild"):
        restored.refit(context.module)


class TwinBiases(torch.nn.Module):
    """Two layers whose biases start equal: the exporter keeps one initializer for both."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 16)
        self.last = torch.nn.Linear(16, 4)
        with torch.no_grad():  # not zeros: the optimizer drops a bias of zeros altogether
            self.first.bias.fill_(0.1)
            self.second.bias.fill_(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.second(torch.relu(self.first(x)))))


def test_tensors_exported_as_one_get_one_initializer_each(tmp_path: Path) -> None:
    torch.manual_seed(0)
    context = record(TwinBiases().eval(), mlp_call, (2, 4), tmp_path)
    backend = ONNXRuntimeBackend().build(context)
    assert backend.build_info["refit_rewrites"] == "1 initializers shared by equal tensors separated"
    model = context.module
    with torch.no_grad():
        model.first.bias.fill_(0.25)
        model.second.bias.fill_(-0.5)

    backend.refit(model)

    _assert_serves_eager(backend, context)


class SlicedTable(torch.nn.Module):
    """Reads four rows of a table at fixed positions: the exporter folds the slice into a constant of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 8))
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.table[3:7].sum(0))


def test_a_weight_folded_beyond_recognition_stops_a_refit_when_it_changes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    context = record(SlicedTable().eval(), mlp_call, (2, 4), tmp_path)
    backend = ONNXRuntimeBackend().build(context)
    assert "must not change (table)" in backend.build_info["refit"]
    model = context.module
    with torch.no_grad():
        model.proj.weight.mul_(2)
    backend.refit(model)  # the table did not change: the rest refits
    _assert_serves_eager(backend, context)

    with torch.no_grad():
        model.table[4] += 1
    with pytest.raises(RefitError, match="table changed, but the exported graph holds it only folded"):
        backend.refit(model)


class FreshEncoder(torch.nn.Module):
    """Initialized as transformers initializes: LayerNorm weights ones, LayerNorm and Linear biases zeros.

    The optimizer exports the equal tensors as one initializer each and drops the head's
    bias of zeros; training then moves them all apart.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        self.norm1 = torch.nn.LayerNorm(16)
        self.feed = torch.nn.Linear(16, 16)
        self.norm2 = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)
        for layer in (self.embed, self.feed, self.head):
            torch.nn.init.zeros_(layer.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.norm1(self.embed(tokens))
        hidden = self.norm2(hidden + torch.relu(self.feed(hidden)))
        return self.head(hidden[:, 0])


def _tokens(batch: int) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    return (torch.randn(batch, 5, 8),), {}


def test_a_fresh_model_refits_after_training_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    context = record(FreshEncoder().eval(), _tokens, (2, 4), tmp_path)
    backend = ONNXRuntimeBackend().build(context)
    assert "separated" in backend.build_info["refit_rewrites"] and "restored" in backend.build_info["refit_rewrites"]
    model = context.module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    for _ in range(3):
        (tokens,), _ = _tokens(4)
        model(tokens).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    assert not torch.equal(model.norm1.weight, model.norm2.weight) and bool(model.head.bias.count_nonzero())

    backend.refit(model)

    _assert_serves_eager(backend, context)


class FreshBlocks(torch.nn.Module):
    """Two convolutions of one shape, each with a BatchNorm at its initial values: their folds look alike."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.norm1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm2 = torch.nn.BatchNorm2d(8)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.norm1(self.conv1(images)))
        return torch.relu(self.norm2(self.conv2(hidden))).mean((2, 3))


def test_batch_norms_at_their_initial_values_refit_to_trained_ones(tmp_path: Path) -> None:
    torch.manual_seed(0)
    context = record(FreshBlocks().eval(), cnn_call, (2, 4), tmp_path)
    backend = ONNXRuntimeBackend().build(context)
    assert "settled" in backend.build_info["refit_rewrites"]
    torch.manual_seed(1)
    trained = FreshBlocks().eval()
    with torch.no_grad():
        for norm in (trained.norm1, trained.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
    context.module.load_state_dict(trained.state_dict())

    backend.refit(context.module)

    _assert_serves_eager(backend, context)
