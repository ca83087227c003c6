"""A route over batch ranges: which callable each batch size reaches.

The graph spec comes from a real tuned module, so its batch axis and bounds are what
tuning records; the backends are plain callables that note the calls they get, since a
route only calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.testing.timing import FAST_PROFILE


class Fake:
    """A backend as far as a route is concerned: something to call."""

    def __init__(self, name: str, log: list[tuple[str, int]]) -> None:
        self.name = name
        self.log = log

    def __call__(self, input: torch.Tensor) -> torch.Tensor:
        self.log.append((self.name, input.shape[0]))
        return torch.full((input.shape[0], 4), float(len(self.name)))

    def __repr__(self) -> str:
        return f"Fake({self.name})"


def tuned(unique_name: Callable[[str], str], batch_sizes: list[int] | None = (1, 16)) -> ait.Module:  # type: ignore[assignment]
    module = ait.Module(nn.Linear(8, 4).eval(), unique_name("linear"))
    data = [torch.randn(8) for _ in range(4)] if batch_sizes else [torch.randn(3, 8) for _ in range(4)]
    strategy = ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(module, data, batch_sizes=list(batch_sizes) if batch_sizes else None, strategy=strategy)
    return module


@pytest.fixture
def spec(unique_name: Callable[[str], str]) -> GraphSpec:
    (graph,) = tuned(unique_name).graph_specs
    assert graph.batch_range == (1, 16)
    return graph


@pytest.fixture
def log() -> list[tuple[str, int]]:
    return []


def picked(route: Route, batch: int) -> Any:
    return route.pick({"input": torch.randn(batch, 8)})


def test_one_backend_serves_every_batch(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    main = Fake("main", log)
    route = Route(spec, main)
    assert route.ranges(1, 16) == [(1, 16, main)]
    assert route.lower == () and route.eager_up_to is None and route.backends == [main]
    assert all(picked(route, batch) is main for batch in (1, 7, 16))


def test_each_batch_goes_to_its_range(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    small, main = Fake("small", log), Fake("main", log)
    route = Route(spec, main, [(2, None), (8, small)])
    assert route.ranges(1, 16) == [(1, 2, None), (3, 8, small), (9, 16, main)]
    assert route.eager_up_to == 2
    expected = {1: RUN_EAGERLY, 2: RUN_EAGERLY, 3: small, 8: small, 9: main, 16: main}
    assert {batch: picked(route, batch) for batch in expected} == expected


def test_ranges_within_a_window(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    small, main = Fake("small", log), Fake("main", log)
    route = Route(spec, main, [(2, None), (8, small)])
    assert route.ranges(5, 12) == [(5, 8, small), (9, 12, main)]
    assert route.ranges(1, 1) == [(1, 1, None)]
    assert route.ranges(2, 3) == [(2, 2, None), (3, 3, small)]
    assert route.ranges(10, 16) == [(10, 16, main)]


def test_ranges_given_out_of_order_are_sorted(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    small, main = Fake("small", log), Fake("main", log)
    route = Route(spec, main, [(8, small), (2, None)])
    assert [up_to for up_to, _ in route.lower] == [2, 8]
    assert picked(route, 1) is RUN_EAGERLY and picked(route, 5) is small


def test_eager_up_to_is_only_the_lowest_range_of_eager(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    small, main = Fake("small", log), Fake("main", log)
    route = Route(spec, main, [(2, small), (8, None)])
    assert route.eager_up_to is None
    assert picked(route, 2) is small and picked(route, 3) is RUN_EAGERLY and picked(route, 9) is main


def test_backends_lists_each_once_the_main_one_first(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    a, b, main = Fake("a", log), Fake("b", log), Fake("main", log)
    route = Route(spec, main, [(1, None), (2, a), (4, b), (8, a), (12, main)])
    assert route.backends == [main, a, b]
    assert Route(spec, main, [(4, None)]).backends == [main]


def test_without_eager_ranges_each_goes_to_the_next_backend_up(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    a, main = Fake("a", log), Fake("main", log)
    route = Route(spec, main, [(2, None), (4, a), (8, None)])
    route.without_eager_ranges()
    assert route.lower == ((2, a), (4, a), (8, main))
    assert route.eager_up_to is None
    assert route.ranges(1, 16) == [(1, 2, a), (3, 4, a), (5, 8, main), (9, 16, main)]
    assert picked(route, 1) is a and picked(route, 6) is main  # the calls were refreshed too
    assert all(picked(route, batch) is not RUN_EAGERLY for batch in range(1, 17))


def test_a_backends_own_callable_is_what_a_call_reaches(spec: GraphSpec, log: list[tuple[str, int]]) -> None:
    """Backends with ``inference_callable`` are called through it, skipping their state check."""
    inner = Fake("inner", log)

    class WithCallable:
        def inference_callable(self) -> Fake:
            return inner

    backend = WithCallable()
    route = Route(spec, Fake("main", log), [(4, backend)])
    assert route.backends[1] is backend and picked(route, 3) is inner


def test_a_graph_without_a_batch_axis_ignores_ranges(unique_name: Callable[[str], str]) -> None:
    module = tuned(unique_name, batch_sizes=None)
    (graph,) = module.graph_specs
    assert graph.batch_range is None
    main, small = Fake("main", []), Fake("small", [])
    route = Route(graph, main, [(2, None), (8, small)])
    assert route.lower == () and route.lower_calls == ()
    assert route.pick({"input": torch.randn(3, 8)}) is main


def test_a_module_routes_its_calls_by_batch(unique_name: Callable[[str], str], log: list[tuple[str, int]]) -> None:
    module = tuned(unique_name)
    (graph,) = module.graph_specs
    small, main = Fake("small", log), Fake("main", log)
    module.set_routes({graph.key: Route(graph, main, [(2, None), (8, small)])})
    for batch in (1, 2, 3, 8, 9, 16):
        x = torch.randn(batch, 8)
        out = module(x)
        if batch <= 2:
            torch.testing.assert_close(out, module.module(x))
    assert log == [("small", 3), ("small", 8), ("main", 9), ("main", 16)]
    log.clear()
    module(torch.randn(17, 8))  # outside the tuned range: the original module, not a backend
    assert log == []
