"""Test backends that leave things behind: helper processes, memory, live instances.

Importable by child processes (the subprocess executor puts the parent's ``sys.path``
on their ``PYTHONPATH``), like :mod:`executor_backends`.
"""

from __future__ import annotations

import subprocess
import time
import weakref
from pathlib import Path
from typing import ClassVar

import attrs
import torch
from executor_backends import _CopyBackend

from aitune_core.backends.base import BackendConfig, BuildContext


@attrs.frozen
class HelperConfig(BackendConfig):
    pid_file: str = ""
    then: str = "pass"  # after starting its helper: "pass", "raise" or "hang"


class HelperBackend(_CopyBackend):
    """Starts a long-lived helper process while building, as compilers start worker pools."""

    name = "test_exec_helper"
    config_class = HelperConfig

    def _build(self, context: BuildContext) -> None:
        config: HelperConfig = self.config  # type: ignore[assignment]
        helper = subprocess.Popen(["sleep", "600"])
        Path(config.pid_file).write_text(str(helper.pid))
        if config.then == "raise":
            raise RuntimeError("the compiler failed after starting its workers")
        if config.then == "hang":
            time.sleep(600)
        super()._build(context)


class HoardBackend(_CopyBackend):
    """Builds by touching 3 GiB, far beyond the small limits the tests set."""

    name = "test_exec_hoard"

    def _build(self, context: BuildContext) -> None:
        self.hoard = torch.ones(3 * 2**30, dtype=torch.uint8)


@attrs.frozen
class TrackedConfig(BackendConfig):
    tag: int = 0


class TrackedBackend(_CopyBackend):
    """Correct and fast; remembers every instance built (weakly) and which were deactivated."""

    name = "test_exec_tracked"
    config_class = TrackedConfig
    built: ClassVar[list[weakref.ref[TrackedBackend]]] = []
    deactivated: ClassVar[set[int]] = set()

    def _build(self, context: BuildContext) -> None:
        super()._build(context)
        TrackedBackend.built.append(weakref.ref(self))

    def _deactivate(self) -> None:
        TrackedBackend.deactivated.add(id(self))
        super()._deactivate()


def helper_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a killed helper left as a zombie, unreaped by init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"
