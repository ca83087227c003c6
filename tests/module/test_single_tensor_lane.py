"""``model(x)``, the commonest tuned call, takes a short way to its backend: same answers, same fallbacks.

The lane is taken when the call is not normalized (a spy on the signature says so), and
every call it does not recognize reaches the general path, which falls back as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from module_helpers import FrozenBackend, mlp, one, samples, tune_frozen
from torch import nn

import aitune_core as ait
from aitune_core.exported.base import _positional_inputs
from aitune_core.exported.layout import IOLayout
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.lane import single_tensor_lane
from aitune_core.module.router import RUN_EAGERLY, Route


class NormalizeSpy:
    """Counts the calls that went the general way (it normalizes every call it routes)."""

    def __init__(self, module: ait.Module, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        signature = module.signature
        real = signature.normalize

        def counted(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            self.count += 1
            return real(args, kwargs)

        monkeypatch.setattr(signature, "normalize", counted)


@pytest.fixture
def tuned(unique_name: Callable[[str], str]) -> Iterator[tuple[ait.Module, FrozenBackend]]:
    module = ait.Module(mlp(), unique_name("lane"))
    tune_frozen(module, batch_sizes=[1, 4])
    (backend,) = module.backends.values()
    assert isinstance(backend, FrozenBackend)
    yield module, backend


def test_a_lone_positional_tensor_takes_the_lane_to_the_backend(
    tuned: tuple[ait.Module, FrozenBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, backend = tuned
    spy = NormalizeSpy(module, monkeypatch)
    x = torch.randn(3, 8)
    before = backend.calls
    by_position = module(x)
    assert spy.count == 0, "model(x) was normalized: it went the general way"
    assert backend.calls == before + 1
    by_keyword = module(input=x)
    assert spy.count == 1 and backend.calls == before + 2
    assert torch.equal(by_position, by_keyword)
    with torch.no_grad():
        assert torch.allclose(by_position, module.module(x))


def test_what_the_lane_does_not_know_falls_back_as_before(
    tuned: tuple[ait.Module, FrozenBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, backend = tuned
    spy = NormalizeSpy(module, monkeypatch)
    before = backend.calls
    eager = module.module
    with torch.no_grad():
        x = torch.randn(9, 8)
        assert torch.allclose(module(x), eager(x))  # batch 9, above the tuned 4: eager
    for x in (torch.randn(2, 8, dtype=torch.float64), torch.randn(2, 3, 8)):
        with pytest.raises(RuntimeError):
            module(x)  # an untuned dtype or rank runs the original module, which cannot take it
    assert backend.calls == before
    assert spy.count == 3, "each call the lane turned away went the general way"


def test_a_tensor_that_requires_grad_still_bypasses_the_backend(tuned: tuple[ait.Module, FrozenBackend]) -> None:
    module, backend = tuned
    x = torch.randn(2, 8, requires_grad=True)
    before = backend.calls
    out = module(x)
    assert out.requires_grad and backend.calls == before
    with torch.no_grad():
        module(x)
    assert backend.calls == before + 1


def test_the_lane_follows_batch_ranges(unique_name: Callable[[str], str]) -> None:
    module = ait.Module(nn.Linear(8, 4).eval(), unique_name("ranges"))
    tune_frozen(module, batch_sizes=[1, 16])
    (spec,) = module.graph_specs
    small, main = (lambda x: x), (lambda x: x)
    routes = {spec.key: Route(spec, main, [(2, None), (8, small)])}
    lane = single_tensor_lane(routes, module.signature, None)
    assert lane is not None
    picks = {batch: lane.call_for(torch.randn(batch, 8)) for batch in (1, 2, 3, 8, 9, 16, 17)}
    assert picks == {1: RUN_EAGERLY, 2: RUN_EAGERLY, 3: small, 8: small, 9: main, 16: main, 17: None}
    assert lane.call_for(torch.randn(3, 9)) is None  # a fixed size differs
    assert lane.call_for(nn.Parameter(torch.randn(3, 8))) is None  # not a plain tensor


class TwoInputs(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class StarArgs(nn.Module):
    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return xs[0] * 2


def test_no_lane_where_it_would_differ_from_the_general_path(unique_name: Callable[[str], str]) -> None:
    module = ait.Module(mlp(), unique_name("keyed"))
    tune_frozen(module)
    routes = module.routes
    assert single_tensor_lane(routes, module.signature, None) is not None
    assert single_tensor_lane({}, module.signature, None) is None
    assert single_tensor_lane(routes, ForwardSignature(TwoInputs().forward), None) is None
    assert single_tensor_lane(routes, ForwardSignature(StarArgs().forward), None) is None


def test_where_plugins_key_calls_the_lane_asks_them_on_every_call(unique_name: Callable[[str], str]) -> None:
    """A plugin's part (a language model's decode phase, say) keys a call apart from the lone tensor's graph."""
    module = ait.Module(mlp(), unique_name("plugin-keyed"))
    tune_frozen(module)
    parts: list[dict[str, Any]] = []

    def none_for_small(arguments: dict[str, Any]) -> str | None:
        parts.append(arguments)
        (tensor,) = arguments.values()
        return None if tensor.shape[0] < 3 else "apart"

    lane = single_tensor_lane(module.routes, module.signature, none_for_small)
    assert lane is not None
    (route,) = module.routes.values()
    assert lane.call_for(torch.randn(2, 8)) is route.call
    assert lane.call_for(torch.randn(3, 8)) is None
    assert [list(arguments) for arguments in parts] == [["input"], ["input"]]


def test_star_args_modules_are_still_routed_the_general_way(unique_name: Callable[[str], str]) -> None:
    module = ait.Module(StarArgs().eval(), unique_name("star"))
    ait.tune(module, samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()))
    (backend,) = module.backends.values()
    before = backend.calls
    x = torch.randn(2, 8)
    assert torch.equal(module(x), x * 2) and backend.calls == before + 1


def _layout(module: nn.Module, *args: Any, **kwargs: Any) -> tuple[IOLayout, ForwardSignature]:
    signature = ForwardSignature(module.forward)
    arguments = signature.normalize(args, kwargs)
    return IOLayout.of_call(arguments, module(*args, **kwargs), signature), signature


class WithFlag(nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale


class Pair(nn.Module):
    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return pair[0] + pair[1]


def test_exported_graphs_read_positional_calls_straight_from_args() -> None:
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert _positional_inputs(*_layout(TwoInputs(), x, y)) == (0, 1)
    assert _positional_inputs(*_layout(TwoInputs(), x, y=y)) == (0, 1)  # how it was recorded does not matter
    assert _positional_inputs(*_layout(WithFlag(), x)) == (0,)
    assert _positional_inputs(*_layout(WithFlag(), x, 2.0)) is None  # a baked-in constant must be checked
    assert _positional_inputs(*_layout(Pair(), (x, y))) is None  # tensors inside a container
    assert _positional_inputs(*_layout(StarArgs(), x)) is None
