"""A backend that records its builds, installed as a fake plugin, and a small model to tune with it.

The backend stands for an engine: its build writes the weights to a file (its one
artifact) and it serves from that file, so a stored file that was changed would change
its outputs. Every build in this process is noted in ``BUILDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import aitune_core as ait
from aitune_core.profiling.measurement import ProfileConfig

FAST = ProfileConfig(warmup_iterations=2, window=3, min_time_s=0.005, max_time_s=0.02, max_batch_search=False)
SIZES = [1, 4]

RECORDING_SOURCE = """
import copy
from pathlib import Path

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig, BuildContext

AITUNE_PLUGIN_API = 1
BUILDS = []


@attrs.frozen
class RecordingConfig(BackendConfig):
    pass


class RecordingFileBackend(Backend):
    name = "test_recording_file"
    config_class = RecordingConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.weights = None
        self._module = None

    def _build(self, context):
        BUILDS.append(context.module_name)
        self.weights = context.cache_dir / "weights.pt"
        torch.save(context.module.state_dict(), self.weights)
        self._load()

    def _load(self):
        module = copy.deepcopy(self.context.module)
        module.load_state_dict(torch.load(self.weights, weights_only=True))
        self._module = module

    def _activate(self):
        self._load()

    def _deactivate(self):
        self._module = None

    def _infer(self, *args, **kwargs):
        return self._module(*args, **kwargs)

    def _artifacts(self):
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts, extra):
        self.weights = Path(artifacts["weights"])


@hookimpl
def aitune_register_backends():
    return [RecordingFileBackend]
"""


def install(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any, version: str = "1.0") -> Any:
    """The recording backend's module, installed as the plugin ``aitune-test-recording``."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-recording", source=RECORDING_SOURCE, version=version))
    import aitune_test_recording

    aitune_test_recording.BUILDS.clear()
    return aitune_test_recording


def model() -> nn.Module:
    torch.manual_seed(0)  # the same weights every time it is built
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def samples() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(8, generator=generator) for _ in range(4)]


def tune(plugin: Any, name: str, module: nn.Module | None = None, **options: Any) -> tuple[ait.Module, Any]:
    """Wrap and tune ``module`` (default: a fresh :func:`model`) with the recording backend."""
    wrapped = ait.Module(module if module is not None else model(), name)
    strategy = ait.MaxThroughputStrategy([plugin.RecordingFileBackend()], profile=FAST)
    report = ait.tune(wrapped, samples(), batch_sizes=SIZES, strategy=strategy, **options)
    return wrapped, report


def rows(report: Any) -> list[Any]:
    return [candidate for graph in report.graphs for candidate in graph.candidates]


def wide_model(seed: int) -> nn.Module:
    """A model whose weights file is about a quarter of a MiB, with weights of its own for each seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)).eval()


def folder_size(folder: Path) -> int:
    """Bytes of the files under ``folder``, each hard-linked file once (as ``du`` counts), for checking the cache."""
    files = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            info = path.stat()
            files[(info.st_dev, info.st_ino)] = info.st_size
    return sum(files.values())


def build_folders(cache: Path) -> list[Path]:
    return sorted((cache / "builds").glob("*/*"))
