"""Multi-line text (graph-spec tables, the summary) for people, or an event for machines.

Tables do not fit on one log line, so in the human format they are printed as blocks
on stderr, when their level is enabled; with ``AITUNE_LOG_FORMAT=json`` they become
one event with the text in it.
"""

from __future__ import annotations

import logging
import sys

from aitune_core.log import get_logger, json_output, level_enabled


def emit_block(title: str, text: str, level: int = logging.INFO, **context: object) -> None:
    if not level_enabled(level):
        return
    logger = get_logger(**context)
    if json_output():
        logger.log(level, title, text=text)
        return
    print(f"{title}:\n{text}", file=sys.stderr, flush=True)
