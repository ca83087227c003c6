"""Partitioning a module that no compiled candidate takes: its submodules are tuned, its forward stays Python."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from partition_helpers import NestedMaskedBlock, PlainBlock, ThreeBlocks, TracedBackend
from torch import nn

import aitune_core as ait
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.config import config
from aitune_core.partition.backend import PartitionBackend
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.reporting.summary import TuneReport
from aitune_core.testing.load_guard import assert_unchanged, fingerprint
from aitune_core.testing.timing import FAST_PROFILE

DECLINED = "eager (declined: data-dependent output shape: aten.nonzero)"


def tune(module: ait.Module, **options: Any) -> TuneReport:
    strategy = ait.FirstWinsStrategy([TracedBackend()], profile=FAST_PROFILE)
    data = [torch.randn(8) for _ in range(4)]
    return ait.tune(module, data, batch_sizes=[1, 2, 4], strategy=strategy, **options)


def partition_of(module: ait.Module) -> PartitionBackend:
    (route,) = module.routes.values()
    assert isinstance(route.backend, PartitionBackend), route.backend
    return route.backend


def served(partition: PartitionBackend) -> dict[str, str]:
    return {node.path: node.serves for node in partition.tree()}


def check_outputs(module: ait.Module) -> None:
    for batch in (1, 3, 4):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(module(x), module.module(x), rtol=0, atol=0)


def test_blocks_1_and_3_compiled_block_2_eager(unique_name: Callable[[str], str]) -> None:
    model = ThreeBlocks().eval()
    module = ait.Module(model, unique_name("net"))
    report = tune(module, partition=True)
    partition = partition_of(module)
    assert served(partition) == {"block1": "TracedBackend()", "block2": DECLINED, "block3": "TracedBackend()"}
    assert report.selected(module.name).startswith("PartitionBackend(2 of 3 submodules tuned: block1, block3)")
    check_outputs(module)
    # Routed calls reach the tuned children's backends; block 2 is the user's own object, run by the parent's forward.
    block1, block3 = (part.graphs[0].route.backend for part in partition.parts if part.tuned)
    before = block1.calls, block3.calls
    ran: list[int] = []
    hook = model.block2.register_forward_hook(lambda _m, _i, out: ran.append(out.shape[0]))
    try:
        with torch.no_grad():  # with grad on, block 3 gets block 2's output, which needs grad: eager's job
            module(torch.randn(2, 8))
    finally:
        hook.remove()
    assert (block1.calls, block3.calls) == (before[0] + 1, before[1] + 1)
    assert ran == [2]


def test_without_partition_the_module_stays_eager(unique_name: Callable[[str], str]) -> None:
    module = ait.Module(ThreeBlocks().eval(), unique_name("net"))
    report = tune(module)
    (route,) = module.routes.values()
    assert isinstance(route.backend, TorchEagerBackend)
    assert report.graphs[0].partition is None and "partitioned" not in str(report)
    assert [g.module for g in report.graphs] == [module.name]  # no child was tuned


def test_config_partition_is_the_default_and_tune_overrides_it(unique_name: Callable[[str], str]) -> None:
    config.partition = True
    on = ait.Module(ThreeBlocks().eval(), unique_name("on"))
    tune(on)
    partition_of(on)
    off = ait.Module(ThreeBlocks().eval(), unique_name("off"))
    tune(off, partition=False)
    assert isinstance(next(iter(off.routes.values())).backend, TorchEagerBackend)


def test_the_summary_draws_the_partition_as_a_tree(unique_name: Callable[[str], str]) -> None:
    name = unique_name("net")
    module = ait.Module(ThreeBlocks().eval(), name)
    text = str(tune(module, partition=True))
    tree = text[text.index(f"module `{name}` graph 0: partitioned") :].splitlines()[:4]
    assert tree[1].startswith("├── block1  TracedBackend()") and tree[1].endswith("% of eager time")
    assert tree[2].startswith(f"├── block2  {DECLINED}") and tree[2].endswith("% of eager time")
    assert tree[3].startswith("└── block3  TracedBackend()") and tree[3].endswith("% of eager time")
    # Each child's candidates have rows of their own, under the child's path.
    assert f"{name}.block2" in text and "data-dependent output shape: aten.nonzero" in text


def test_the_descent_goes_down_to_the_depth_limit(unique_name: Callable[[str], str]) -> None:
    deep = ait.Module(ThreeBlocks(NestedMaskedBlock).eval(), unique_name("deep"))
    tune(deep, partition=True)
    (middle,) = [node for node in partition_of(deep).tree() if node.path == "block2"]
    assert middle.serves == "partitioned"
    assert [(n.path, n.serves) for n in middle.children] == [("linear", "TracedBackend()")]
    check_outputs(deep)

    config.partition_max_depth = 1
    shallow = ait.Module(ThreeBlocks(NestedMaskedBlock).eval(), unique_name("shallow"))
    tune(shallow, partition=True)
    assert served(partition_of(shallow))["block2"] == DECLINED
    check_outputs(shallow)


def test_children_below_the_minimum_size_stay_eager(unique_name: Callable[[str], str]) -> None:
    config.partition_min_params = 100  # block1 has 144 parameters, block3 68
    module = ait.Module(ThreeBlocks().eval(), unique_name("net"))
    report = tune(module, partition=True)
    tree = served(partition_of(module))
    assert tree["block1"] == "TracedBackend()"
    assert tree["block3"] == "eager (too small: 68 parameters, partition_min_params is 100)"
    assert f"{module.name}.block3" not in {g.module for g in report.graphs}  # never built
    check_outputs(module)


def test_nothing_worth_tuning_leaves_the_module_eager(unique_name: Callable[[str], str]) -> None:
    config.partition_min_time_share = 0.99  # no block takes 99% of the module's time
    module = ait.Module(ThreeBlocks().eval(), unique_name("net"))
    report = tune(module, partition=True)
    assert isinstance(next(iter(module.routes.values())).backend, TorchEagerBackend)
    assert report.graphs[0].partition is None
    assert report.graphs[0].selected is not None and report.graphs[0].selected.status == "fallback"


def test_a_compiled_candidate_that_only_lost_on_speed_is_not_partitioned(unique_name: Callable[[str], str]) -> None:
    config.timer = ScriptedTimer({EAGER: 1e-3}, default=2e-3)  # every candidate validates, and is slower
    module = ait.Module(ThreeBlocks(PlainBlock).eval(), unique_name("net"))
    report = tune(module, partition=True)
    assert isinstance(next(iter(module.routes.values())).backend, TorchEagerBackend)
    assert [g.module for g in report.graphs] == [module.name]


def test_the_users_module_is_unchanged(unique_name: Callable[[str], str]) -> None:
    model = ThreeBlocks(NestedMaskedBlock).eval()
    children = dict(model.named_modules())
    before = fingerprint(model)
    forwards = {name: m.__dict__.get("forward") for name, m in model.named_modules()}
    module = ait.Module(model, unique_name("net"))
    tune(module, partition=True)
    module(torch.randn(3, 8))
    assert_unchanged(before, fingerprint(model))
    assert dict(model.named_modules()) == children
    assert {name: m.__dict__.get("forward") for name, m in model.named_modules()} == forwards
    assert all(not isinstance(m, ait.Module) for m in model.modules())


def test_weights_changed_after_tuning_are_served_eagerly(unique_name: Callable[[str], str]) -> None:
    model = ThreeBlocks().eval()
    module = ait.Module(model, unique_name("net"))
    tune(module, partition=True)
    doubled = {name: tensor * 2 for name, tensor in model.block1.state_dict().items()}
    model.block1.load_state_dict(doubled)  # the tuned copies no longer match
    x = torch.randn(2, 8)
    torch.testing.assert_close(module(x), model(x), rtol=0, atol=0)


def test_a_module_without_children_is_not_partitioned(unique_name: Callable[[str], str]) -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + x[x > 0].sum()

    module = ait.Module(Masked().eval(), unique_name("leaf"))
    report = tune(module, partition=True)
    assert isinstance(next(iter(module.routes.values())).backend, TorchEagerBackend)
    assert report.graphs[0].partition is None


@pytest.mark.parametrize("value", [-1, 1.5, "2", True])
def test_partition_settings_are_checked(value: Any) -> None:
    with pytest.raises(ValueError, match="partition_min_params"):
        config.partition_min_params = value
    with pytest.raises(ValueError, match="partition_max_depth"):
        config.partition_max_depth = value if value != 1.5 else 0
    with pytest.raises(ValueError, match="partition_min_time_share"):
        config.partition_min_time_share = value if not isinstance(value, float) else 1.0
    with pytest.raises(ValueError, match="partition"):
        config.partition = "yes"  # type: ignore[assignment]


def test_a_partition_is_released_and_restored_with_its_module(unique_name: Callable[[str], str]) -> None:
    """Tuning another module deactivates this one's backends, children included, and brings them back."""
    first = ait.Module(ThreeBlocks().eval(), unique_name("first"))
    tune(first, partition=True)
    partition = partition_of(first)
    children = partition.child_backends()
    assert all(b.state.name == "ACTIVE" for b in children)
    first.deactivate()
    assert partition.state.name == "INACTIVE" and all(b.state.name == "INACTIVE" for b in children)
    first.activate()
    assert partition.state.name == "ACTIVE" and all(b.state.name == "ACTIVE" for b in children)
    check_outputs(first)


def test_eager_winning_as_a_candidate_still_partitions(unique_name: Callable[[str], str]) -> None:
    """With eager itself among the candidates, the graph is served eagerly all the same: the partition is tried."""
    module = ait.Module(ThreeBlocks().eval(), unique_name("net"))
    strategy = ait.FirstWinsStrategy([TracedBackend(), TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 2, 4], strategy=strategy, partition=True)
    (route,) = module.routes.values()
    assert route.lower == ()
    assert served(partition_of(module)) == {
        "block1": "TracedBackend()",
        "block2": DECLINED,
        "block3": "TracedBackend()",
    }
    check_outputs(module)
