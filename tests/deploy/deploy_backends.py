"""Backends for the deploy tests: two that write a file they describe as a standalone artifact, one that does not.

Their files hold the module's weights (torch's format), standing for an ONNX model or an
OpenVINO IR: the core's tests check what the export writes and its configuration, which
depend on the description, not on the file's contents; the plugins' tests run real
artifacts with their own runtimes. The module doubles as a plugin (``AITUNE_PLUGIN_API``
and the hook), installed as a fake distribution so that checkpoints naming them load.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig, BuildContext
from aitune_core.backends.base import NoDeployable
from aitune_core.backends.deployable import Deployable, RuntimeOptions
from aitune_core.exported.deploy_io import flat_io
from aitune_core.graphs.graph_spec import GraphSpec

AITUNE_PLUGIN_API = 1


@attrs.frozen
class FileConfig(BackendConfig):
    threads: int | None = None


class FileBackend(Backend):
    """Serves a copy of the module loaded from the weights file its build wrote."""

    name = "test_deploy_file"
    config_class = FileConfig
    files = ("model.onnx",)
    format = "onnx"

    def __init__(self, config: FileConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.path: Path | None = None
        self._module: torch.nn.Module | None = None

    def _build(self, context: BuildContext) -> None:
        self.path = context.cache_dir / self.files[0]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(context.module.state_dict(), self.path)
        self._activate()

    def _activate(self) -> None:
        assert self.context is not None and self.path is not None
        module = copy.deepcopy(self.context.module)
        module.load_state_dict(torch.load(self.path, weights_only=True))
        self._module = module

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        return self._module(*args, **kwargs)

    def _artifacts(self) -> dict[str, Path]:
        return {"model": self.path} if self.path is not None else {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.path = Path(artifacts["model"])

    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        if self.path is None:
            return NoDeployable("not built")
        inputs, outputs = flat_io(None, graph)  # named as exported graphs name them
        files = dict.fromkeys(self.files, self.path)
        runtime = RuntimeOptions(threads=self.config.threads, settings={"performance_hint": "latency"})  # type: ignore[attr-defined]
        return Deployable(self.format, files, self.files[0], inputs, outputs, runtime)


class OtherFileBackend(FileBackend):
    """The same, described as an OpenVINO IR."""

    name = "test_deploy_other"
    files = ("model.xml", "model.bin")
    format = "openvino_ir"


@attrs.frozen
class InterpretedConfig(BackendConfig):
    pass


class InterpretedBackend(Backend):
    """Runs the module itself, as a JIT compiler's backend does: nothing stands alone."""

    name = "test_deploy_interpreted"
    config_class = InterpretedConfig

    @property
    def is_jit(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        pass

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.context is not None
        return self.context.module(*args, **kwargs)


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [FileBackend, OtherFileBackend, InterpretedBackend]
