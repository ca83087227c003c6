"""Inductor JIT takes new weights with nothing to copy (they are its graphs' inputs), unless they were frozen in."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_inductor import TorchInductorJitBackend

_names = itertools.count()


@pytest.fixture
def no_global_freezing() -> Iterator[None]:
    import torch._inductor.config as inductor_config

    frozen = inductor_config.freezing
    inductor_config.freezing = False
    yield
    inductor_config.freezing = frozen


def test_only_a_compile_that_kept_the_weights_as_inputs_refits(no_global_freezing: None) -> None:
    assert TorchInductorJitBackend().can_refit()
    assert TorchInductorJitBackend(options={"max_autotune": True}).can_refit()
    assert not TorchInductorJitBackend(options={"freezing": True}).can_refit()
    assert not TorchInductorJitBackend(precompile=True).can_refit()
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
    assert not TorchInductorJitBackend().can_refit()


@pytest.mark.slow
def test_after_new_weights_the_same_compiled_backend_serves_them(no_global_freezing: None) -> None:
    ait.config.on_weight_change = "eager"
    model = TinyMLP().eval()
    wrapped = ait.Module(model, f"jit-refit-{next(_names)}")
    strategy = ait.OneBackendStrategy(TorchInductorJitBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [torch.randn(8) for _ in range(8)], batch_sizes=[2, 4], strategy=strategy)
    (route,) = wrapped.routes.values()
    backend = route.backend
    assert isinstance(backend, TorchInductorJitBackend)
    recompiles = backend.compile_stats()["recompiles"]
    torch.manual_seed(7)
    model.load_state_dict({key: torch.randn_like(value) for key, value in model.state_dict().items()})
    report = ait.refit(wrapped)
    (row,) = report.routes
    assert row.outcome == "refitted" and row.validation.startswith("passed"), str(report)
    (route,) = wrapped.routes.values()
    assert route.backend is backend, "the compiled backend itself serves the new weights"
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
    assert backend.compile_stats()["recompiles"] == recompiles, "new values in the same tensors compile nothing"
