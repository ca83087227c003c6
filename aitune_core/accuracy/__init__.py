"""Faster within an accuracy budget: lossy backends chosen per module against the user's own metric.

``tune(..., accuracy=AccuracyBudget(metric, max_drop))`` tunes each module's lossless
candidates first, as without a budget, then its lossy ones, and keeps a module lossy
only while the whole pipeline's metric, on held-out data, drops by at most
``max_drop`` against eager. It sits above the strategies, beside ``tune``.
"""

from __future__ import annotations

from aitune_core.accuracy import metrics
from aitune_core.accuracy.budget import AccuracyBudget, AccuracyError
from aitune_core.accuracy.record import AccuracyRecord, LossyChoice

__all__ = ["AccuracyBudget", "AccuracyError", "AccuracyRecord", "LossyChoice", "metrics"]
