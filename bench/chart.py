"""The PNG chart of a bench run: throughput of every variant, one panel per model and batch.

Rows named ``"<model> batch <n>"`` with a time per call (ms) are turned into samples per
second; other rows (overheads, import costs) are left to the tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.timing import Result

_MODEL_ROW = re.compile(r"^(?P<model>\S+) batch (?P<batch>\d+)$")


def throughput_panels(results: Mapping[str, Sequence[Result]]) -> dict[str, dict[str, float]]:
    """``{"<suite>: <model> batch <n>": {variant: samples/s}}``."""
    panels: dict[str, dict[str, float]] = {}
    for suite, rows in results.items():
        for row in rows:
            match = _MODEL_ROW.match(row.name)
            if match is None or row.unit != "ms" or row.stats.median <= 0:
                continue
            panel = panels.setdefault(f"{suite}: {row.name}", {})
            panel[row.variant] = int(match["batch"]) / row.stats.median
    return panels


def write_chart(results: Mapping[str, Sequence[Result]], path: Path) -> Path | None:
    """Draw the chart; None when there is nothing to draw or matplotlib is not installed."""
    panels = throughput_panels(results)
    if not panels:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for axis, (title, values) in zip(axes.flat, panels.items(), strict=False):
        names = list(values)
        bars = axis.bar(range(len(names)), [values[n] for n in names], color="#4c72b0")
        for bar, name in zip(bars, names, strict=True):
            if name.startswith("aitune"):
                bar.set_color("#dd8452")
        axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        axis.set_title(title, fontsize=9)
        axis.set_ylabel("samples/s")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
