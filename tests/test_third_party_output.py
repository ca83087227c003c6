"""Other libraries' output during a build is collected, not printed, and the handlers come back."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from aitune_core.third_party_output import collected_third_party_output


def test_records_and_warnings_are_collected_and_handlers_restored(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    torch_logger = logging.getLogger("torch")
    child = logging.getLogger("torch._guards_test_child")
    printing = logging.StreamHandler()
    child.addHandler(printing)
    handlers_before = torch_logger.handlers[:]
    try:
        with collected_third_party_output() as output:
            logging.getLogger("torch._guards").error("guard failed: recovering")
            child.warning("a child with its own handler")
            warnings.warn("deprecated argument", FutureWarning, stacklevel=1)
            logging.getLogger("myapp").warning("the application's own")
        assert output.errors == 1 and output.warnings == 2
        assert any("guard failed: recovering" in line for line in output.lines)
        assert any("FutureWarning: deprecated argument" in line for line in output.lines)
        assert not any("the application's own" in line for line in output.lines)
        assert "guard failed" not in capsys.readouterr().err
        assert torch_logger.handlers == handlers_before and child.handlers == [printing]
        log = output.write(tmp_path / "build.log")
        assert log is not None and "guard failed: recovering" in log.read_text()
        assert output.summary() == "1 errors and 2 warnings from other libraries"
    finally:
        child.removeHandler(printing)


def test_handlers_come_back_when_the_build_raises():
    torch_logger = logging.getLogger("torch")
    before = (torch_logger.handlers[:], torch_logger.propagate)
    with pytest.raises(RuntimeError), collected_third_party_output():
        raise RuntimeError("build failed")
    assert (torch_logger.handlers, torch_logger.propagate) == before
