"""What a module's checkpoint keeps of the budget its routes were chosen under, and the check made at load.

Loading cannot re-measure the metric (it has neither the metric nor the data), so the
checkpoint states what was measured: the budget, the metric's name, the drop, and the
held-out data's fingerprint. What loading can check is that each lossy choice is still
lossy, and each exact one still exact, by the installed backends' own declaration
(``Backend.lossy``): a plugin that changed what a config does would otherwise serve
numbers the measured drop says nothing about.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from aitune_core.errors import CheckpointError


@attrs.define
class LossyChoice:
    """A backend the search made serve although it changes the numbers: where, and which."""

    graph: str
    backend: str
    """Its ``describe()``."""


@attrs.define
class AccuracyRecord:
    """A module's routes were chosen under ``tune(..., accuracy=...)``: the budget and what it measured."""

    metric: str
    max_drop: float
    drop: float | None
    """The whole pipeline's drop on the held-out data, as measured for what serves."""
    data_fingerprint: str
    data_note: str
    lossy: list[LossyChoice] = attrs.field(factory=list)

    def describe(self) -> str:
        drop = "not measured" if self.drop is None else f"{self.drop:.4g}"
        choices = ", ".join(f"graph {c.graph}: {c.backend}" for c in self.lossy) or "none (lossless)"
        return (
            f"accuracy budget: {self.metric} may drop by at most {self.max_drop:g}; measured drop {drop} "
            f"on held-out data {self.data_fingerprint} ({self.data_note}); lossy here: {choices}"
        )


def check_lossy_choices(module: str, record: AccuracyRecord | None, served: Iterable[tuple[str, Any]]) -> None:
    """Refuse, naming the fix, a checkpoint whose lossy choices the installed backends no longer declare so.

    served: ``(graph name, restored backend)`` for every backend the module's graphs store.
    """
    if record is None:
        return
    lossy = {(c.graph, c.backend) for c in record.lossy}
    for graph, backend in served:
        chosen = (graph, backend.describe()) in lossy
        if chosen and not backend.lossy:
            raise CheckpointError(
                f"module `{module}` graph {graph}: the checkpoint chose {backend.describe()} as a lossy backend under "
                f"its accuracy budget ({record.metric}, measured drop {record.drop}), but the installed backend "
                "declares it exact (Backend.lossy is False), so the measured drop no longer describes it. Install the "
                "plugin version the checkpoint names, or tune again with tune(..., accuracy=...) and save"
            )
        if not chosen and backend.lossy:
            raise CheckpointError(
                f"module `{module}` graph {graph}: the checkpoint kept {backend.describe()} as an exact backend under "
                f"its accuracy budget ({record.metric}), but the installed backend declares it lossy "
                "(Backend.lossy is True), so the measured drop does not cover it. Install the plugin version the "
                "checkpoint names, or tune again with tune(..., accuracy=...) and save"
            )
