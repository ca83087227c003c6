"""AccuracyBudget: how much of the user's own metric a faster pipeline may cost.

A tensor tolerance bounds the error of one module's output, which a user cannot relate
to what they care about (top-1 accuracy, token agreement). A budget bounds the drop of
their metric over what the function given to ``tune`` returns, so lossy backends
(quantization, reduced precision) are chosen per module against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

Metric = Callable[[Any, Any], float]
"""``metric(outputs, reference_outputs) -> float``, higher is better."""


class AccuracyError(RuntimeError):
    """The accuracy search cannot go on: the metric raised or gave no number, or the held-out data is unusable."""


def metric_name(metric: Metric) -> str:
    """What the summary and checkpoints call the metric: its qualified name, or its type's for callables."""
    name = getattr(metric, "__qualname__", None) or getattr(metric, "__name__", None)
    if name is None:
        name = type(metric).__qualname__
    module = getattr(metric, "__module__", None)
    if module == "aitune_core.accuracy.metrics":
        return f"ait.metrics.{name}"
    return str(name)


def _callable(_instance: object, _attribute: object, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"metric must be callable as metric(outputs, reference_outputs) -> float, got {value!r}")


def _drop(_instance: object, _attribute: object, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"max_drop must be a finite number of at least 0, got {value!r}")


@attrs.frozen
class AccuracyBudget:
    """Pass as ``tune(..., accuracy=AccuracyBudget(ait.metrics.top1_agreement, 0.01))``.

    metric: ``metric(outputs, reference_outputs) -> float``, higher is better; it scores
        what the tuned pipeline returns against what eager returns for the same inputs.
    max_drop: the most the metric may fall: ``metric(eager, eager) - metric(tuned, eager)``
        on the held-out data stays at or below it. 0 allows no lossy backend at all.
    data: held-out samples, in the form of ``tune``'s dataset and distinct from it. None
        holds out a share of the dataset (:data:`HELD_OUT_SHARE`), which tuning then does not see.
    """

    metric: Metric = attrs.field(validator=_callable)
    max_drop: float = attrs.field(validator=_drop)
    data: Sequence[Any] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def metric_name(self) -> str:
        return metric_name(self.metric)

    def describe(self) -> str:
        return f"{self.metric_name} may drop by at most {self.max_drop:g}"
