"""Backends that run one graph exported to ONNX: what ONNX Runtime and TensorRT share.

Both export the graph through :func:`~aitune_onnx.export_cache.export_into`, ship what
they built from it as artifacts, and restore from those without exporting again or
having the model's code at hand. What they need besides the files is the same: the
:class:`~aitune_onnx.layout.IOLayout` between calls and the model's flat tensors
(saved as JSON extra state where it can be, rebuilt from one eager call where it
cannot) and the module's forward signature. :class:`ExportedGraphBackend` keeps those,
so a subclass only says how its files are made and opened; :class:`ExportedGraphConfig`
holds the export settings both configs offer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import torch

from aitune_core.plugin_api import Backend, BackendConfig, BuildContext, ForwardSignature, data_dependent_reason
from aitune_onnx.export import EXPORTERS, EXTERNAL_DATA, ExportConfig, ExportedModel
from aitune_onnx.export_cache import export_into
from aitune_onnx.layout import IOLayout, LayoutNotSerializable, layout_from_context

LAYOUT_KEY = "layout"


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


class ExportedGraphBackend(Backend):
    """A backend whose artifacts are made from the graph's ONNX export.

    A subclass builds with :meth:`_export` and :meth:`_adopt`, opens its files in
    ``_load`` (after :meth:`_call_layout`), names its files in ``_artifact_paths``, and
    adds its own extra state to what :meth:`_restore` and :meth:`_extra_state` keep here.
    """

    config: ExportedGraphConfig
    required_artifacts: ClassVar[tuple[str, ...]] = ()
    """The artifacts a checkpoint must hold for :meth:`_restore` to accept it."""
    kept_extra: ClassVar[tuple[str, ...]] = ()
    """Extra-state keys a restored backend has no build to recompute from, so it hands them on as loaded."""

    def __init__(self, config: ExportedGraphConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._layout: IOLayout | None = None
        self._signature: ForwardSignature | None = None
        self._exported: ExportedModel | None = None
        self._restored_extra: dict[str, Any] = {}

    @property
    def is_jit(self) -> bool:
        return False

    @property
    def exported(self) -> ExportedModel | None:
        """What the build exported (None for a backend restored from a checkpoint)."""
        return self._exported

    @property
    def layout(self) -> IOLayout | None:
        return self._layout

    # ------------------------------------------------------------------ building
    def declines(self, context: BuildContext) -> str | None:
        """A forward that decides in Python on a value read from its data cannot be exported.

        The exporter would fail, or bake one branch in; such a graph is declined before
        exporting, naming the op. Data-dependent sizes export fine.
        """
        return data_dependent_reason(context, symbolic_sizes=True)

    def _check_available(self, device: torch.device) -> None:
        """Refuse a build that cannot run here before an export is spent on it."""
        availability = self.availability(device)
        if not availability.available:
            raise RuntimeError(f"{self.describe()} cannot run on {device}: {availability.reason}")

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
        self._layout = exported.layout
        self._signature = context.signature

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _load()")

    def _file_to_load(self, path: Path | None, what: str) -> Path:
        """``path``, which a load opens; a clear error when there is none yet or it is gone."""
        if path is None:
            raise RuntimeError(f"{self.describe()} has no {what}; build it or restore it from a checkpoint")
        if not path.is_file():
            raise FileNotFoundError(f"{self.describe()}: {what} {path} does not exist")
        return path

    def _call_layout(self) -> tuple[IOLayout, ForwardSignature]:
        """The layout and forward signature every call goes through, from the build or the checkpoint.

        A live context's signature is the module's own; a restored backend without one
        takes the signature its stored layout recorded.
        """
        if self._layout is None:
            self._layout = self._layout_from_context()
        if self.context is not None:
            self._signature = self.context.signature
        elif self._signature is None:
            self._signature = self._layout.signature()
        if self._signature is None:
            raise RuntimeError(f"{self.describe()} needs a BuildContext to learn the module's forward signature")
        return self._layout, self._signature

    def _layout_from_context(self) -> IOLayout:
        return layout_from_context(self.describe(), self.context)

    def _activate(self) -> None:
        self._load()

    # ------------------------------------------------------------------ persistence
    def _artifact_paths(self) -> dict[str, Path | None]:
        """Each artifact by name, None while there is no such file (before a build, or not written)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _artifact_paths()")

    def _artifacts(self) -> dict[str, Path]:
        return {name: path for name, path in self._artifact_paths().items() if path is not None}

    def _extra_state(self) -> dict[str, Any]:
        layout = None
        if self._layout is not None:
            try:
                layout = self._layout.to_dict()
            except LayoutNotSerializable:
                layout = None  # rebuilt from the module on restore, see _layout_from_context
        extra: dict[str, Any] = {LAYOUT_KEY: layout}
        extra.update({key: value for key, value in self._restored_extra.items() if key in self.kept_extra})
        return extra

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        for name in self.required_artifacts:
            if name not in artifacts:
                raise ValueError(f"{type(self).__name__} checkpoint data has no {name!r} artifact")
        layout = extra.get(LAYOUT_KEY)
        self._layout = IOLayout.from_dict(layout) if layout else None
        self._restored_extra = dict(extra)
