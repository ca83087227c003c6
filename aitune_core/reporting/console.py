"""Multi-line text (graph-spec tables, the summary) for people, or an event for machines.

Tables do not fit on one log line, so in the human format they are printed as blocks
on stderr; with ``AITUNE_LOG_FORMAT=json`` they become one event with the text in it.
"""

from __future__ import annotations

import os
import sys

from aitune_core.log import get_logger


def emit_block(title: str, text: str, **context: object) -> None:
    if os.environ.get("AITUNE_LOG_FORMAT", "").lower() == "json":
        get_logger(**context).info(title, text=text)
        return
    get_logger(**context).debug(title, text=text)
    print(f"{title}:\n{text}", file=sys.stderr, flush=True)
