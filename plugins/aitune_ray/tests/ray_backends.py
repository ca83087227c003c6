"""A demo model made slow on purpose and test backends, importable by Ray workers.

Ray workers find this module through the ``PYTHONPATH`` the test's Ray is started with.
``SkipDelayBackend`` is clearly faster than eager (it drops a 5 ms sleep), so that the
winner does not depend on noisy timings. The cluster test's backends report where they
build to a Ray actor (:class:`BuildLog`), and :data:`PLUGIN_SOURCE` registers them.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core import ProfileConfig
from aitune_core.plugin_api import Backend, BackendConfig, BackendState, BuildContext
from aitune_core.testing.engine import DemoMLP

FAST_PROFILE = ProfileConfig(
    warmup_iterations=3, window=4, min_time_s=0.01, max_time_s=0.05, max_batch_search=False, sweep=False
)


class SlowDemoMLP(DemoMLP):
    """The demo MLP with a sleep in its forward, as a stand-in for a slow eager model."""

    def __init__(self, delay_s: float = 0.005) -> None:
        super().__init__()
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().forward(x)


@attrs.frozen
class EmptyConfig(BackendConfig):
    pass


class SkipDelayBackend(Backend):
    """Runs a copy of the module without its sleep: correct, and clearly faster than eager."""

    name = "test_ray_skip_delay"
    config_class = EmptyConfig

    def _prepare(self, module: nn.Module) -> nn.Module:
        fast = copy.deepcopy(module)
        fast.delay_s = 0.0
        return fast

    @property
    def is_jit(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        self.built: nn.Module | None = self._prepare(context.module)

    def _activate(self) -> None:
        assert self.context is not None
        self.built = self._prepare(self.context.module)

    def _deactivate(self) -> None:
        self.built = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.built is not None
        return self.built(*args, **kwargs)


class AbortBackend(SkipDelayBackend):
    """Its build kills the worker process."""

    name = "test_ray_abort"

    def _build(self, context: BuildContext) -> None:
        os.abort()


@attrs.frozen
class HangConfig(BackendConfig):
    sleep_s: float = 600.0


class HangBackend(SkipDelayBackend):
    """Its build never finishes in time."""

    name = "test_ray_hang"
    config_class = HangConfig

    def _build(self, context: BuildContext) -> None:
        time.sleep(self.config.sleep_s)  # type: ignore[attr-defined]


class ArtifactBackend(SkipDelayBackend):
    """Ahead-of-time: writes its weights as an artifact and, restored, serves from that file."""

    name = "test_ray_artifact"

    def __init__(self, config: BackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.weights: Path | None = None
        self.loaded_from: Path | None = None

    @property
    def is_jit(self) -> bool:
        return False

    def _build(self, context: BuildContext) -> None:
        self.weights = context.cache_dir / "weights.pt"
        torch.save(context.module.state_dict(), self.weights)
        super()._build(context)

    def _artifacts(self) -> dict[str, Path]:
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.weights = artifacts["weights"]

    def _activate(self) -> None:
        assert self.context is not None and self.weights is not None
        module = self._prepare(self.context.module)
        if self._state is BackendState.CHECKPOINT_LOADED:
            module.load_state_dict(torch.load(self.weights, weights_only=True))
            self.loaded_from = self.weights
        self.built = module


BUILD_LOG = "AITUNE_TEST_BUILD_LOG"
"""Names the Ray actor (:class:`BuildLog`) that builds on the cluster test's workers report to; unset elsewhere."""


class BuildLog:
    """The cluster test's Ray actor (on the head node): builds say where they run, through Ray, not a file.

    A build goes on once ``meet`` builds have reported, so that many ran at the same
    time: on as many nodes, when each node runs one candidate at a time.
    """

    def __init__(self) -> None:
        self.builds: list[dict[str, str]] = []
        self.meet = 1

    def reset(self, meet: int) -> None:
        self.builds, self.meet = [], meet

    def arrived(self, build: dict[str, str]) -> None:
        self.builds.append(build)

    def met(self) -> bool:
        return len(self.builds) >= self.meet

    def seen(self) -> list[dict[str, str]]:
        return list(self.builds)


def report_build(backend: Backend, context: BuildContext) -> bool:
    """Tell the cluster test's :class:`BuildLog` where this build runs and wait for the others it meets.

    False where there is no such log (the driver, other tests' Rays): the build goes on at once.
    """
    name = os.environ.get(BUILD_LOG)
    if not name:
        return False
    import ray

    log = ray.get_actor(name)
    where = {
        "backend": backend.describe(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "cache_dir": os.environ.get("AITUNE_CACHE_DIR", ""),
        "temp_dir": tempfile.gettempdir(),
        "build_dir": str(context.cache_dir),
    }
    ray.get(log.arrived.remote(where))
    deadline = time.monotonic() + 120.0
    while not ray.get(log.met.remote()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the builds to meet never came: {ray.get(log.seen.remote())}")
        time.sleep(0.05)
    return True


class ReportingJitBackend(SkipDelayBackend):
    """:class:`SkipDelayBackend` that reports where it builds (see :func:`report_build`)."""

    name = "test_ray_reporting_jit"

    def _build(self, context: BuildContext) -> None:
        report_build(self, context)
        super()._build(context)


class OtherArtifactBackend(ArtifactBackend):
    """A second :class:`ArtifactBackend`: two that pass, so that one of them loses."""

    name = "test_ray_other_artifact"


class ReportingAotBackend(ArtifactBackend):
    """:class:`ArtifactBackend` that reports where it builds (see :func:`report_build`)."""

    name = "test_ray_reporting_aot"

    def _build(self, context: BuildContext) -> None:
        report_build(self, context)
        super()._build(context)


class StuckBackend(SkipDelayBackend):
    """On the cluster test's workers, reports its build and never ends it (its node goes first); elsewhere, builds."""

    name = "test_ray_stuck"

    def _build(self, context: BuildContext) -> None:
        if report_build(self, context):
            time.sleep(600.0)  # the executor's time limit ends it if the node is not removed
        super()._build(context)


PLUGIN_SOURCE = """
from aitune_core.plugin_api import PLUGIN_API_VERSION, hookimpl
from ray_backends import ReportingAotBackend, ReportingJitBackend

AITUNE_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def aitune_register_backends():
    return [ReportingAotBackend, ReportingJitBackend]
"""
"""A plugin registering the reporting backends, so that a checkpoint holding them loads."""


MEETING_DIR = "AITUNE_TEST_MEETING_DIR"
MEETING_COUNT = "AITUNE_TEST_MEETING_COUNT"


class MeetingBackend(SkipDelayBackend):
    """Where ``AITUNE_TEST_MEETING_DIR`` is set (the Ray workers of the graphs test), each build waits for the others.

    Each build leaves a file in that folder and goes on only once ``AITUNE_TEST_MEETING_COUNT``
    builds have: so the candidates pass only if that many were built at the same time.
    Elsewhere (the driver, a run in this process) it builds at once.
    """

    name = "test_ray_meeting"

    def _build(self, context: BuildContext) -> None:
        folder = os.environ.get(MEETING_DIR)
        if folder:
            wanted = int(os.environ.get(MEETING_COUNT, "1"))
            (Path(folder) / f"{os.getpid()}-{time.monotonic_ns()}").touch()
            deadline = time.monotonic() + 120.0
            while len(list(Path(folder).iterdir())) < wanted:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {len(list(Path(folder).iterdir()))} of {wanted} builds ran together")
                time.sleep(0.05)
        super()._build(context)


class FourBranches(nn.Module):
    """Four blocks side by side on the same input, each its own wrapped module; their outputs summed."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([block(x) for block in self.blocks]).sum(0)
