"""Exporters' chatter kept out of users' consoles while a backend exports or converts.

``torch.export``, the ONNX exporter and converters built on them warn about what
aitune handles anyway (traced size arithmetic that validation checks at min, opt and
max; deprecations of paths it does not take; axis names shared on purpose) and log
notes on every export. Each exporting backend needs the same silence around its
export, with the loggers of its own exporter named.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_export(*loggers: str) -> Iterator[None]:
    """Ignore warnings, and log only errors from ``loggers``, until the block ends (levels restored)."""
    found = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in found]
    for logger in found:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(found, levels, strict=True):
            logger.setLevel(level)
