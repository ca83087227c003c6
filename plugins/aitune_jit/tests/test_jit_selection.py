"""Which modules the JIT takes, and the options that say so."""

from __future__ import annotations

import pytest
import torch
from jit_helpers import Pipeline
from torch import nn

import aitune_core as ait
from aitune_jit.first_call import FirstCallWatch
from aitune_jit.options import JitOptions
from aitune_jit.selection import choose


def test_depth_zero_is_the_model_itself() -> None:
    assert choose(Pipeline(), JitOptions()) == [""]


def test_deeper_levels_take_the_modules_with_parameters() -> None:
    assert choose(Pipeline(), JitOptions(depth=1)) == ["embed", "body", "norm"]  # act has none
    assert choose(Pipeline(), JitOptions(depth=2)) == ["body.0", "body.2"]


def test_min_params_as_a_count_or_a_share() -> None:
    model = Pipeline()  # embed 1088, body 8320, norm 128 parameters
    assert choose(model, JitOptions(depth=1, min_params=1000)) == ["embed", "body"]
    assert choose(model, JitOptions(depth=1, min_params=0.5)) == ["body"]


def test_exclude_skips_a_module_and_everything_inside_it() -> None:
    assert choose(Pipeline(), JitOptions(depth=1, exclude="body,no*")) == ["embed"]
    assert choose(Pipeline(), JitOptions(depth=2, exclude=["body"])) == []


def test_a_users_own_wrapper_is_left_alone() -> None:
    model = Pipeline()
    model.body = ait.Module(model.body, "own-body")
    assert choose(model, JitOptions(depth=1)) == ["embed", "norm"]


def test_options_from_the_environment_and_overrides() -> None:
    env = {"AITUNE_JIT_DEPTH": "1", "AITUNE_JIT_CALLS": "4", "AITUNE_JIT_BACKENDS": "eager, inductor_jit"}
    options = JitOptions.from_env(env, calls=8)
    assert (options.depth, options.calls, options.backends) == (1, 8, ("eager", "inductor_jit"))
    assert JitOptions.from_env({"AITUNE_JIT_CACHE": "0"}).cache is False
    assert JitOptions.from_env({"AITUNE_JIT_CACHE": " Off "}).cache is False  # config's one yes/no parser
    with pytest.raises(ValueError, match="AITUNE_JIT_CACHE='maybe'"):
        JitOptions.from_env({"AITUNE_JIT_CACHE": "maybe"})
    with pytest.raises(ValueError, match="AITUNE_JIT_DEPTH='one'"):
        JitOptions.from_env({"AITUNE_JIT_DEPTH": "one"})
    with pytest.raises(ValueError, match="calls must be >= 1"):
        JitOptions(calls=0)


def test_the_model_is_the_first_top_level_call_in_eval_mode_with_parameters() -> None:
    original = nn.Module.__call__
    found: list[nn.Module] = []
    watch = FirstCallWatch(found.append)
    watch.install()
    try:
        training, parameterless, model = nn.Linear(2, 2), nn.ReLU().eval(), Pipeline().eval()
        training(torch.randn(1, 2))
        parameterless(torch.randn(1, 2))
        assert found == [] and watch.installed
        model(torch.randn(1, 16))  # its layers' calls are nested: only the model is a candidate
        assert found == [model]
        assert not watch.installed
        assert nn.Module.__call__ is original  # other modules pay nothing from here on
    finally:
        watch.remove()


def test_the_watch_gives_up_when_no_call_qualifies() -> None:
    original = nn.Module.__call__
    watch = FirstCallWatch(lambda module: None, give_up_after=3)
    watch.install()
    layer = nn.Linear(2, 2)  # training mode: never a candidate
    for _ in range(3):
        layer(torch.randn(1, 2))
    assert not watch.installed and nn.Module.__call__ is original
