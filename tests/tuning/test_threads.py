"""tune() builds, validates and times at the thread count the user serves at, and says which."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import torch
from tuning_helpers import FAST_PROFILE, NoDelayBackend, SlowableMLP

import aitune_core as ait
from aitune_core.backends import BackendConfig
from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.strategies import FirstWinsStrategy


@attrs.frozen
class ThreadsSeenConfig(BackendConfig):
    pass


class ThreadsSeenBackend(NoDelayBackend):
    """Notes torch's thread count at every build and call: what the candidate was measured at."""

    name = "test_threads_seen"
    config_class = ThreadsSeenConfig
    seen: ClassVar[list[int]] = []

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        ThreadsSeenBackend.seen.append(torch.get_num_threads())
        return super()._infer(*args, **kwargs)


def _tune(unique_name: Any, **kwargs: Any) -> tuple[ait.Module, ait.TuneReport]:
    ThreadsSeenBackend.seen = []
    module = ait.Module(SlowableMLP().eval(), unique_name("mlp"))
    timer = ScriptedTimer({EAGER: 2e-3, "ThreadsSeenBackend()": 1e-3})
    strategy = FirstWinsStrategy([ThreadsSeenBackend()], profile=FAST_PROFILE, timer=timer)
    samples = [torch.randn(16) for _ in range(6)]
    report = ait.tune(module, samples, batch_sizes=[1, 2], strategy=strategy, **kwargs)
    return module, report


@pytest.fixture
def two_threads() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_candidates_run_at_the_threads_asked_and_torch_goes_back(unique_name: Any, two_threads: None) -> None:
    module, report = _tune(unique_name, threads=1)
    assert ThreadsSeenBackend.seen and set(ThreadsSeenBackend.seen) == {1}
    assert torch.get_num_threads() == 2  # the caller's setting is back
    assert report.threads == 1 and module.threads == 1
    assert "Measured at 1 torch thread(s)" in report.summary()


def test_default_is_torchs_own_setting(unique_name: Any, two_threads: None) -> None:
    module, report = _tune(unique_name)
    assert set(ThreadsSeenBackend.seen) == {2}
    assert report.threads == 2 and module.threads == 2


def test_torch_goes_back_when_tune_raises(unique_name: Any, two_threads: None) -> None:
    with pytest.raises(TypeError, match="func must be callable"):
        ait.tune(None, [torch.randn(16)], threads=1)  # type: ignore[arg-type]
    module = ait.Module(SlowableMLP().eval(), unique_name("mlp"))

    def broken(x: torch.Tensor) -> None:
        assert torch.get_num_threads() == 1
        raise RuntimeError("the user's function failed")

    with pytest.raises(RuntimeError, match="the user's function failed"):
        ait.tune(broken, [torch.randn(16)], threads=1)
    assert torch.get_num_threads() == 2
    del module


@pytest.mark.parametrize(("threads", "error"), [(0, ValueError), (-2, ValueError), ("2", TypeError), (True, TypeError)])
def test_bad_thread_counts_are_refused_before_any_work(threads: Any, error: type[Exception], unique_name: Any) -> None:
    calls: list[int] = []
    ait.Module(SlowableMLP().eval(), unique_name("mlp"))
    with pytest.raises(error, match="threads"):
        ait.tune(lambda x: calls.append(1), [torch.randn(16)], threads=threads)
    assert calls == []


def test_checkpoint_records_threads_and_a_load_at_another_count_says_so(
    unique_name: Any, two_threads: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config, "cache_dir", tmp_path / "cache")
    model = torch.nn.Sequential(SlowableMLP().eval())
    model[0] = ait.Module(model[0], unique_name("mlp"))
    strategy = FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(model, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy, threads=1)
    ait.save(model, tmp_path / "ckpt")
    ait.unwrap(model)

    def load() -> list[dict[str, Any]]:
        fresh = torch.nn.Sequential(SlowableMLP().eval())
        with capture() as events:
            loaded = ait.load(fresh, tmp_path / "ckpt")
        assert loaded[0].threads == 1
        ait.unwrap(loaded)
        return [e for e in events if e.get("event") == "loaded at another thread count"]

    warned = load()  # this process runs at 2
    assert len(warned) == 1
    assert "tuned at 1 torch thread(s), running at 2" in warned[0]["reason"]
    assert "torch.set_num_threads(1)" in warned[0]["reason"]
    torch.set_num_threads(1)
    assert load() == []
