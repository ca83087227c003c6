"""quiet_export: the exporters' warnings and notes stay out of the console, and only for the block."""

from __future__ import annotations

import logging
import warnings

import pytest

from aitune_core.plugin_api.exported import quiet_export


def test_warnings_and_the_named_loggers_notes_are_held_back_inside_the_block(
    caplog: pytest.LogCaptureFixture,
) -> None:
    named, other = logging.getLogger("aitune-test.exporter"), logging.getLogger("aitune-test.elsewhere")
    named.setLevel(logging.INFO)
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_export("aitune-test.exporter"):
            warnings.warn("traced size arithmetic", UserWarning, stacklevel=1)
            named.warning("operators skipped")
            named.error("the export failed")
            other.warning("not the exporter's")
        warnings.warn("after the block", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["after the block"]
    assert [record.getMessage() for record in caplog.records] == ["the export failed", "not the exporter's"]
    assert named.level == logging.INFO


def test_levels_come_back_when_the_export_raises() -> None:
    named = logging.getLogger("aitune-test.raising")
    named.setLevel(logging.DEBUG)
    with pytest.raises(RuntimeError, match="export failed"), quiet_export("aitune-test.raising"):
        assert named.level == logging.ERROR
        raise RuntimeError("export failed")
    assert named.level == logging.DEBUG
