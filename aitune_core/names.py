"""The rules every registered name follows, and the device tuning uses when none is given.

Backend, executor and plugin-facing names all follow one rule, so a name that works in
one place works in every other: in a checkpoint, on the command line, in settings.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NAME_RULE = r"[a-z][a-z0-9_.-]*"
"""Lowercase, starting with a letter: ``inductor_jit``, ``ray``, ``my.backend-2``."""
_NAME = re.compile(NAME_RULE)


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def default_device() -> torch.device:
    """CUDA when there is a GPU, else the CPU: where tuning runs and availability is judged by default."""
    import torch  # the settings check names at ``import aitune_core``, which leaves torch for first use

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
