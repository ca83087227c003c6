"""Slow plugin imports are named with their seconds, on a scripted clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from aitune_core import log
from aitune_core.plugins import PluginStatus, loading
from aitune_core.plugins.loader import PluginSource, Selection, builtin_source, discover
from aitune_core.plugins.registry import PluginRegistry


@attrs.define
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def taking(self, seconds: float, load: Callable[[], Any]) -> Callable[[], Any]:
        """``load``, as if it took ``seconds``."""

        def slow() -> Any:
            self.now += seconds
            return load()

        return slow


def slow_sources(clock: FakeClock, seconds: dict[str, float]) -> list[PluginSource]:
    good = Path(__file__).parent / "fake_dists"
    sources = [builtin_source(), *discover([good / "good", good / "unavailable"])]
    return [attrs.evolve(s, load=clock.taking(seconds.get(s.name, 0.0), s.load)) for s in sources]


def test_slow_plugin_import_is_named_with_its_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "good"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "unavailable"))
    clock = FakeClock()
    sources = slow_sources(clock, {"good": 30.0, "unavailable": 0.5})
    with log.capture() as events:
        PluginRegistry.load(sources, strict=False, selection=Selection(), clock=clock)
    [slow] = [event for event in events if event["event"] == "plugin import is slow"]
    assert slow["log_level"] == "warning"
    assert (slow["plugin"], slow["distribution"], slow["seconds"]) == ("good", "aitune-fake-good", 30.0)
    [total] = [event for event in events if event["event"].startswith("loading plugins took")]
    assert total["log_level"] == "info"
    assert total["event"] == "loading plugins took 30.5 s (slowest: aitune-fake-good, 30.0 s)"


def test_many_quick_imports_only_report_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "good"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "unavailable"))
    monkeypatch.setattr(loading, "SLOW_LOAD_S", 1.0)
    clock = FakeClock()
    sources = slow_sources(clock, {"good": 0.6, "unavailable": 0.7})
    with log.capture() as events:
        PluginRegistry.load(sources, strict=False, selection=Selection(), clock=clock)
    assert not [event for event in events if event["event"] == "plugin import is slow"]
    [total] = [event for event in events if event["event"].startswith("loading plugins took")]
    assert total["event"] == "loading plugins took 1.3 s (slowest: aitune-fake-unavailable, 0.7 s)"


def test_quick_loading_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "good"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_dists" / "unavailable"))
    clock = FakeClock()
    with log.capture() as events:
        PluginRegistry.load(slow_sources(clock, {"good": 0.1}), strict=False, selection=Selection(), clock=clock)
    assert not [e for e in events if e["event"] == "plugin import is slow" or e["event"].startswith("loading plugins")]


def test_a_slow_import_that_fails_is_still_named(aitune_fake_dist: Any) -> None:
    dist = aitune_fake_dist("aitune-fake-slow-exit", "import sys\n\nsys.exit(1)\n")
    clock = FakeClock()
    sources = [attrs.evolve(s, load=clock.taking(5.0, s.load)) for s in discover([dist.path])]
    with log.capture() as events:
        registry = PluginRegistry.load(sources, strict=False, selection=Selection(), clock=clock)
    assert registry.records()[0].status is PluginStatus.FAILED
    [slow] = [event for event in events if event["event"] == "plugin import is slow"]
    assert slow["distribution"] == "aitune-fake-slow-exit" and slow["seconds"] == 5.0
