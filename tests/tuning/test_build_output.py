"""What other libraries say while a candidate builds goes to its build log, not to the console."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from tuning_helpers import FAST_PROFILE, NoDelayBackend, SlowableMLP

import aitune_core as ait
from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.strategies import FirstWinsStrategy


class ChattyBackend(NoDelayBackend):
    """Builds fine, after torch logs an error it recovers from and a library warns, as compilers do."""

    name = "test_chatty"

    def _build(self, context: Any) -> None:
        logging.getLogger("torch._guards").error("Error while creating guard: recovered")
        warnings.warn("an argument of the exporter is deprecated", FutureWarning, stacklevel=1)
        super()._build(context)


def test_build_chatter_goes_to_the_build_log_with_one_console_line(
    unique_name, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    config.cache_dir = tmp_path / "cache"
    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([ChattyBackend()], profile=FAST_PROFILE)
    with capture() as events:
        report = ait.tune(module, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    assert report.graphs[0].selected is not None and report.graphs[0].selected.status == "selected"
    console = capsys.readouterr()
    assert "Error while creating guard" not in console.err + console.out
    assert "is deprecated" not in console.err + console.out
    kept = [event for event in events if event["event"] == "third-party output kept"]
    assert len(kept) == 1 and kept[0]["said"] == "1 errors and 1 warnings from other libraries"
    text = Path(kept[0]["log"]).read_text()
    assert "ERROR torch._guards: Error while creating guard: recovered" in text
    assert "FutureWarning: an argument of the exporter is deprecated" in text


class FallbackBackend(NoDelayBackend):
    """Builds by its second route, and says so, as an exporter that falls back to tracing does."""

    name = "test_fallback_note"

    def _build(self, context: Any) -> None:
        super()._build(context)
        self.build_note = "converted by tracing: export failed"


def test_a_build_note_is_shown_in_the_candidates_row(unique_name, tmp_path: Path):
    config.cache_dir = tmp_path / "cache"
    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([FallbackBackend()], profile=FAST_PROFILE)
    report = ait.tune(module, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    (row,) = [c for c in report.graphs[0].candidates if c.backend.startswith("FallbackBackend")]
    assert row.note == "converted by tracing: export failed"
    (line,) = [r for r in report.rows() if r[2] == row.backend]
    assert line[-1].startswith("converted by tracing: export failed")
    assert "converted by tracing" in report.summary()
