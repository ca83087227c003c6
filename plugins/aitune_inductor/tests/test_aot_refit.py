"""An AOT package takes new weights without compiling: it reads the module's tensors, or copies them in.

Two real compiles: a package reading the module's weights (the default), and one that
keeps its weights because its graph holds a tensor that is no parameter or buffer.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aitune_core.plugin_api import BuildContext, RefitError
from aitune_core.testing.recording import at_shape, record
from aitune_inductor import TorchInductorAotBackend

pytestmark = pytest.mark.slow


class Classifier(torch.nn.Module):
    """A three-class head: its 3-element bias is what Inductor inlines into kernels unless told not to."""

    def __init__(self, offset: bool = False) -> None:
        super().__init__()
        self.body = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 3)
        self.offset = torch.arange(3.0) if offset else None  # a plain tensor attribute: not in the state dict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(torch.relu(self.norm(self.body(x))))
        return out + self.offset if self.offset is not None else out


def seeded(seed: int, offset: bool = False) -> Classifier:
    torch.manual_seed(seed)
    return Classifier(offset).eval()


def recorded(model: torch.nn.Module, folder: Path) -> BuildContext:
    return record(model, lambda batch: ((torch.randn(batch, 8),), {}), (2, 4, 8), folder)


def assert_serves_eager(backend: TorchInductorAotBackend, context: BuildContext) -> None:
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            torch.testing.assert_close(backend(*args, **kwargs), context.module(*args, **kwargs))


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    return recorded(seeded(0), tmp_path_factory.mktemp("refit"))


@pytest.fixture(scope="module")
def built(context: BuildContext) -> Iterator[TorchInductorAotBackend]:
    backend = TorchInductorAotBackend().build(context)
    yield backend
    backend.deactivate()


@pytest.fixture
def fresh(context: BuildContext, built: TorchInductorAotBackend) -> Iterator[torch.nn.Module]:
    """The tuned module with its first weights back, as every test starts."""
    module = context.module
    start = {name: tensor.clone() for name, tensor in seeded(0).state_dict().items()}
    module.load_state_dict(start)
    built.refit(module)
    yield module
    for name, child in seeded(0).named_children():
        if type(getattr(module, name)) is not type(child) or name == "head":
            setattr(module, name, child)  # a test that replaced a submodule gets the original layout back
    module.load_state_dict(start)
    built.refit(module)


def test_reads_the_modules_tensors(built: TorchInductorAotBackend) -> None:
    assert built.build_info["weights"] == "read from the module"
    assert built.build_info["refit"] == "yes" and built.can_refit() and built.refit_refusal == ""


def test_refit_serves_new_weights_and_leaves_the_module_as_it_is(
    built: TorchInductorAotBackend, context: BuildContext, fresh: torch.nn.Module
) -> None:
    new = seeded(1).state_dict()
    fresh.load_state_dict(new)
    built.refit(fresh)
    assert_serves_eager(built, context)
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, new[name]), name
    assert built.build_info["last_refit"]["tensors"] == 0  # written in place: the package reads them already


def test_refit_points_the_package_at_replaced_parameters(
    built: TorchInductorAotBackend, context: BuildContext, fresh: torch.nn.Module
) -> None:
    replaced = weakref.ref(fresh.head.weight)
    fresh.head.weight = torch.nn.Parameter(torch.randn(3, 16))
    args, kwargs = at_shape(context, "opt")
    with torch.no_grad():
        assert not torch.allclose(built(*args, **kwargs), fresh(*args, **kwargs))  # still the replaced one
    built.refit(fresh)
    assert built.build_info["last_refit"]["tensors"] == 1
    assert_serves_eager(built, context)
    gc.collect()
    assert replaced() is None


def test_a_shape_change_is_refused_by_name(built: TorchInductorAotBackend, fresh: torch.nn.Module) -> None:
    fresh.head = torch.nn.Linear(16, 5)
    with pytest.raises(RefitError, match=r"head\.(bias|weight) has shape \(5"):
        built.refit(fresh)


def test_a_package_holding_its_weights_takes_new_ones_by_copy(tmp_path: Path) -> None:
    context = recorded(seeded(0, offset=True), tmp_path)
    backend = TorchInductorAotBackend().build(context)
    try:
        assert backend.build_info["weights"] == "in the package" and backend.can_refit()
        context.module.load_state_dict(seeded(2, offset=True).state_dict())
        backend.refit(context.module)
        assert_serves_eager(backend, context)
    finally:
        backend.deactivate()


def test_a_package_whose_weights_are_not_described_refuses_to_load(
    built: TorchInductorAotBackend, context: BuildContext
) -> None:
    """The package carries a mark that it reads the module's tensors: without them described it would read nothing."""
    data = built.to_dict()
    del data["extra"]["weights"]
    restored = TorchInductorAotBackend.from_dict(data)
    assert not restored.can_refit() and "older aitune-inductor" in restored.refit_refusal
    with pytest.raises(RuntimeError, match="reads its weights from the module"):
        restored.activate(context)
