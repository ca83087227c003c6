"""Keeping other libraries' warnings and errors during a candidate's build out of the console.

Compilers and exporters talk a lot while they work: a JIT build of a CNN logs dozens of
torch ``ERROR`` lines about guards that it then recovers from, exporters warn about
every deprecated argument. When the build succeeds, that output is noise on the user's
console; when it fails, it is the first thing to read. So while a candidate builds,
records of the third-party loggers and Python warnings are collected; they are written
to the candidate's build log, and the console gets one line that says how many there
were and where they are.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import attrs

THIRD_PARTY_LOGGERS = ("torch", "onnx", "onnxscript", "onnxruntime", "transformers", "torchao", "timm", "py.warnings")
"""The loggers whose records a build collects (with every logger below them)."""


@attrs.define
class ThirdPartyOutput:
    """What other libraries said during one build, as text lines."""

    lines: list[str] = attrs.field(factory=list)
    errors: int = 0
    warnings: int = 0

    def write(self, path: Path) -> Path | None:
        """Append the lines to ``path`` (the candidate's build log); None when there is nothing to write."""
        if not self.lines:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(self.lines) + "\n")
        return path

    def summary(self) -> str:
        return f"{self.errors} errors and {self.warnings} warnings from other libraries"


class _Collector(logging.Handler):
    def __init__(self, output: ThirdPartyOutput) -> None:
        super().__init__(logging.DEBUG)
        self.output = output
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.output.lines.append(self.format(record))
        except Exception:  # a record that cannot be formatted is dropped, as logging itself does
            return
        if record.levelno >= logging.ERROR:
            self.output.errors += 1
        elif record.levelno >= logging.WARNING:
            self.output.warnings += 1


def _loggers_with_handlers() -> list[logging.Logger]:
    names = [
        name
        for name in list(logging.root.manager.loggerDict)
        if any(name == root or name.startswith(root + ".") for root in THIRD_PARTY_LOGGERS)
    ]
    found = [logging.getLogger(name) for name in {*THIRD_PARTY_LOGGERS, *names}]
    return [logger for logger in found if logger.handlers or logger.name in THIRD_PARTY_LOGGERS]


@contextlib.contextmanager
def collected_third_party_output() -> Iterator[ThirdPartyOutput]:
    """Collect third-party log records and warnings raised inside the block, instead of printing them.

    Their handlers are put back afterwards, whatever happens inside. The application's
    own loggers and aitune's are untouched.
    """
    output = ThirdPartyOutput()
    collector = _Collector(output)
    saved = [(logger, logger.handlers[:], logger.propagate) for logger in _loggers_with_handlers()]
    for logger, _handlers, _propagate in saved:
        logger.handlers = [collector] if logger.name in THIRD_PARTY_LOGGERS else []
        logger.propagate = logger.name not in THIRD_PARTY_LOGGERS
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield output
            finally:
                for warning in caught:
                    output.lines.append(f"WARNING {warning.category.__name__}: {warning.message} ({warning.filename})")
                    output.warnings += 1
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate
