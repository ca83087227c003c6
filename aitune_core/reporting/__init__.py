"""Reports and console output of a tuning run."""

from aitune_core.reporting.summary import GraphReport, TuneReport

__all__ = ["GraphReport", "TuneReport"]
