"""inspect, wrap and unwrap on a small encoder-like model.

Time comes from a clock the model itself advances: each leaf layer adds its cost, so
which module takes the most time is decided by the test, not by the machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Costly(nn.Module):
    """A linear layer that advances the clock by ``cost`` seconds per call."""

    def __init__(self, clock: Clock, cost: float, width: int = 8) -> None:
        super().__init__()
        self.clock = clock
        self.cost = cost
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.now += self.cost
        return self.linear(x)


class Layer(nn.Module):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.attn = Costly(clock, 0.003)
        self.mlp = Costly(clock, 0.005)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(x))


class Encoder(nn.Module):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(clock) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Model(nn.Module):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.embed = Costly(clock, 0.001)
        self.encoder = Encoder(clock)
        self.head = Costly(clock, 0.001)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x))) * scale


def data() -> list[torch.Tensor]:
    return [torch.randn(8) for _ in range(8)]


def test_inspect_times_the_tree_and_suggests_the_encoder() -> None:
    clock = Clock()
    model = Model(clock).eval()
    report = ait.inspect(model, data(), batch_sizes=[2, 4], clock=clock)
    rows = {row.path: row for row in report.rows}
    assert rows[""].type == "Model"
    # 8 samples at batch 2 give 4 calls, at batch 4 two: every call after the warm-up one is timed.
    assert report.calls == 6 and rows["encoder"].calls == 6
    assert rows["encoder"].total_ms == pytest.approx(6 * 3 * 8.0)
    assert rows["encoder"].share == pytest.approx(24 / 26)
    assert rows["encoder.layers.0"].share == pytest.approx(8 / 26)
    assert "encoder.layers.0.mlp" not in rows  # depth 4, below max_depth=3
    assert rows["encoder"].parameters == sum(p.numel() for p in model.encoder.parameters())
    assert rows["encoder"].graphs == 1
    assert report.suggest() == ["encoder"]
    text = report.table()
    assert "Suggested: aitune_core.wrap(model, ['encoder'])" in text
    assert json.loads(report.to_json())["suggested"] == ["encoder"]


def test_max_depth_limits_the_rows() -> None:
    clock = Clock()
    report = ait.inspect(Model(clock).eval(), data(), batch_sizes=[2], max_depth=1, clock=clock)
    assert sorted(row.path for row in report.rows) == ["", "embed", "encoder", "head"]


def test_graphs_count_distinct_input_structures() -> None:
    """A keyword that is sometimes given is a second graph; strict mode also keys its value."""
    clock = Clock()
    model = Model(clock).eval()
    dataset: list[Any] = [((torch.randn(2, 8),), {}), ((torch.randn(2, 8),), {"scale": 2.0})]
    report = ait.inspect(lambda args, kwargs: model(*args, **kwargs), dataset, clock=clock, warmup=0)
    rows = {row.path: row for row in report.rows}
    assert rows[""].graphs == 2
    assert rows["encoder"].graphs == 1


def test_a_function_calling_the_model_is_inspected_through_it() -> None:
    clock = Clock()
    model = Model(clock).eval()
    report = ait.inspect(lambda x: model(x) + 1, data(), batch_sizes=[2], clock=clock)
    assert report.rows[0].type == "Model"
    assert report.suggest() == ["encoder"]


def test_a_large_time_share_is_preferred_to_a_small_one_of_many_graphs() -> None:
    clock = Clock()
    model = Model(clock).eval()
    model.encoder.layers[0].mlp.cost = 0.2  # one layer dominates
    report = ait.inspect(model, data(), batch_sizes=[2], clock=clock)
    assert report.suggest() == ["encoder"]  # the encoder holds it and more


def test_inspect_removes_its_hooks_and_changes_nothing() -> None:
    clock = Clock()
    model = Model(clock).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ait.inspect(model, data(), batch_sizes=[2], clock=clock)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training


def test_wrap_replaces_matches_named_by_path(unique_name: Callable[[str], str]) -> None:
    model = Model(Clock()).eval()
    prefix = unique_name("m") + "/"
    keys = list(model.state_dict())
    wrappers = ait.wrap(model, ["encoder.layers.*", "head"], prefix=prefix)
    assert [w.name for w in wrappers] == [
        prefix + p for p in ("encoder.layers.0", "encoder.layers.1", "encoder.layers.2", "head")
    ]
    assert isinstance(model.encoder.layers[1], ait.Module)
    assert list(model.state_dict()) == keys  # the wrappers share their module's parameters
    x = torch.randn(2, 8)
    torch.testing.assert_close(model(x), model(x))


def test_wrap_patterns() -> None:
    from aitune_core.wrapping import matches

    assert matches("encoder.layers.*", "encoder.layers.0")
    assert not matches("encoder.layers.*", "encoder.layers.0.mlp")
    assert matches("**.mlp", "encoder.layers.0.mlp")
    assert matches("**", "encoder")
    assert not matches("enc", "encoder")


def test_wrap_never_clears_other_wrappers_nor_wraps_inside_them(unique_name: Callable[[str], str]) -> None:
    model = Model(Clock()).eval()
    prefix = unique_name("m") + "/"
    (encoder,) = ait.wrap(model, "encoder", prefix=prefix)
    (head,) = ait.wrap(model, ["head"], prefix=prefix)
    assert model.encoder is encoder and model.head is head
    with pytest.raises(ait.WrapError, match=r"no submodule of Model matches 'encoder.layers.0'"):
        ait.wrap(model, "encoder.layers.0", prefix=prefix)


def test_a_match_inside_another_is_left_to_the_outer_one(unique_name: Callable[[str], str]) -> None:
    model = Model(Clock()).eval()
    wrappers = ait.wrap(model, ["encoder", "encoder.layers.*"], prefix=unique_name("m") + "/")
    assert [w.name.rsplit("/", 1)[1] for w in wrappers] == ["encoder"]
    assert not isinstance(model.encoder.layers[0], ait.Module)


def test_a_pattern_matching_nothing_names_the_paths() -> None:
    with pytest.raises(ait.WrapError, match=r"'encodr'; its top-level submodules are embed, encoder, head"):
        ait.wrap(Model(Clock()), "encodr")


def test_unwrap_puts_the_originals_back(unique_name: Callable[[str], str]) -> None:
    model = Model(Clock()).eval()
    original = model.encoder
    names = [w.name for w in ait.wrap(model, ["encoder", "head"], prefix=unique_name("m") + "/")]
    assert sorted(ait.unwrap(model)) == sorted(names)
    assert model.encoder is original and not isinstance(model.head, ait.Module)


def test_wrap_then_tune_routes_the_wrapped_module(unique_name: Callable[[str], str]) -> None:
    clock = Clock()
    model = Model(clock).eval()
    report = ait.inspect(model, data(), batch_sizes=[2, 4], clock=clock)
    (encoder,) = ait.wrap(model, report.suggest(), prefix=unique_name("m") + "/")
    ait.tune(model, data(), batch_sizes=[2, 4], strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()]))
    assert encoder.state is ait.ModuleState.TUNED
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.head(encoder.module(model.embed(x))))


def test_time_in_the_models_own_forward_suggests_the_whole_model() -> None:
    clock = Clock()

    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.small = Costly(clock, 0.001)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock.now += 0.01  # work done by the model itself, outside any submodule
            return self.small(x)

    report = ait.inspect(Flat().eval(), data(), batch_sizes=[2], clock=clock)
    assert report.suggest() == []
    assert "Suggested: the whole model" in report.table()


def test_inspect_model_command(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from aitune_core.cli import main

    script = tmp_path / "workload.py"
    script.write_text(
        "import torch\n"
        "from aitune_core.testing.models import TinyMLP\n"
        "def workload():\n"
        "    return TinyMLP().eval(), [torch.randn(8) for _ in range(4)]\n"
        "if __name__ == '__main__':\n"
        "    raise SystemExit('the main block must not run')\n"
    )
    assert main(["inspect-model", f"{script}:workload", "--batch-sizes", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["modules"][0]["type"] == "TinyMLP" and printed["calls"] == 2
    assert main(["inspect-model", f"{script}:missing"]) == 1
    assert "has no function 'missing'; it defines TinyMLP, workload" in capsys.readouterr().err
