"""``report.accuracy.plot_pareto``: a chart where matplotlib is installed, a clear error where it is not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aitune_core.reporting.accuracy import AccuracyReport, SensitivityRow, TrialPoint

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def searched() -> AccuracyReport:
    """A search over three modules: each alone, then two of them combined within the budget."""
    report = AccuracyReport(metric="top1_agreement", max_drop=0.01, data_note="8 of 40", data_fingerprint="f")
    report.sensitivities = [SensitivityRow(f"m{i}", ["int8"], 1.5, 0.3) for i in range(3)]
    report.trials = [
        TrialPoint("lossless", [], 1.0, 0.0, "baseline", kept=True),
        TrialPoint("only m0", ["m0"], 1.3, 0.002, "sensitivity"),
        TrialPoint("only m1", ["m1"], 1.2, 0.05, "sensitivity"),
        TrialPoint("only m2", ["m2"], 1.25, 0.001, "sensitivity"),
        TrialPoint("+ m2", ["m2"], 1.25, 0.001, "combination", kept=True),
        TrialPoint("+ m0", ["m2", "m0"], 1.6, 0.004, "combination", kept=True),
        TrialPoint("+ m1", ["m2", "m0", "m1"], 1.9, 0.06, "combination"),
    ]
    report.chosen = ["m2", "m0"]
    return report


def test_the_chart_is_a_png_of_every_trial(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the chart needs matplotlib, which this environment lacks")
    target = searched().plot_pareto(tmp_path / "pareto.png")
    assert target == tmp_path / "pareto.png"
    data = target.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000


def test_without_matplotlib_the_error_names_the_package_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it imports
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ModuleNotFoundError, match="pip install matplotlib"):
        searched().plot_pareto(tmp_path / "pareto.png")
    assert not (tmp_path / "pareto.png").exists()


def test_long_module_lists_are_counted_not_spelled_out() -> None:
    report = searched()
    text = report.render()
    assert "2 of the 3 modules" not in text  # two are still named
    assert "m2, m0" in text
    report.chosen = ["m0", "m1", "m2"]
    assert "lossy in 3 of the 3 modules with a lossy option" in report.outcome()
    front_rows = [line for line in text.splitlines() if line.startswith("+ m1")]
    assert front_rows and "3 of the 3 modules with a lossy option" in front_rows[0]
