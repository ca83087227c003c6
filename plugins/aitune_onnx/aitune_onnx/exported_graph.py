"""Backends that run one graph exported to ONNX: what ONNX Runtime and TensorRT share.

Both export the graph through :func:`~aitune_onnx.export_cache.export_into`, ship what
they built from it as artifacts, and restore from those without exporting again or
having the model's code at hand. What every exported-graph backend needs besides its
files (the layout between calls and flat tensors, the forward signature, their place
in checkpoints) is aitune's :class:`~aitune_core.plugin_api.exported.ExportedGraphBackend`;
:class:`ONNXExportedGraphBackend` adds the ONNX export, shared through the export
cache, and :class:`ExportedGraphConfig` holds the export settings both configs offer.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_core.plugin_api import BackendConfig, BuildContext
from aitune_core.plugin_api.exported import ExportedGraphBackend
from aitune_onnx.export import EXPORTERS, EXTERNAL_DATA, ExportConfig, ExportedModel
from aitune_onnx.export_cache import export_into


def _opset(_instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a whole number >= 1, got {value!r}")


@attrs.frozen
class ExportedGraphConfig(BackendConfig):
    """How the graph is exported: see :class:`~aitune_onnx.export.ExportConfig` for each setting.

    Candidates whose export settings agree share one export (see
    :mod:`aitune_onnx.export_cache`), whichever backend they are.
    """

    exporter: str = attrs.field(default="dynamo", validator=attrs.validators.in_(EXPORTERS))
    torchscript_fallback: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    opset_version: int | None = attrs.field(default=None, validator=_opset)
    optimize: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    external_data: str = attrs.field(default="auto", validator=attrs.validators.in_(EXTERNAL_DATA))

    def export_config(self) -> ExportConfig:
        return ExportConfig(
            exporter=self.exporter,
            torchscript_fallback=self.torchscript_fallback,
            opset_version=self.opset_version,
            optimize=self.optimize,
            external_data=self.external_data,
        )


class ONNXExportedGraphBackend(ExportedGraphBackend):
    """A backend whose artifacts are made from the graph's ONNX export.

    The layout, signature and checkpoint handling are aitune's
    (:class:`aitune_core.plugin_api.exported.ExportedGraphBackend`, which OpenVINO's backend
    shares too); a subclass builds with :meth:`_export` and :meth:`_adopt`, opens its
    files in ``_load`` and names them in ``_artifact_paths``.
    """

    config: ExportedGraphConfig

    def __init__(self, config: ExportedGraphConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._exported: ExportedModel | None = None

    @property
    def exported(self) -> ExportedModel | None:
        """What the build exported (None for a backend restored from a checkpoint)."""
        return self._exported

    def _export(
        self, context: BuildContext, file_name: str, module: torch.nn.Module | None = None, variant: str = ""
    ) -> ExportedModel:
        """``file_name`` in the build's folder: exported, or shared with candidates that export the same.

        ``module``: what to export in place of the context's module (a wrapper around
        it), with ``variant`` saying how it differs, so that its exports are shared
        only with candidates that export the same wrapper.
        """
        return export_into(
            context.cache_dir,
            context.module if module is None else module,
            context.graph_spec,
            context.samples,
            context.signature,
            self.config.export_config(),
            context.device,
            file_name,
            variant=variant,
        )

    def _adopt(self, exported: ExportedModel, context: BuildContext) -> None:
        """Take the layout and signature from a build, once its files are made."""
        self._exported = exported
        self._adopt_layout(exported.layout, context)
