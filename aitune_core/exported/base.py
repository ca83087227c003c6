"""Backends that run one graph exported to files: what ONNX Runtime, TensorRT and OpenVINO share.

Each exports the graph (to ONNX, to an OpenVINO IR), ships what it built as artifacts,
and restores from those without exporting again or having the model's code at hand.
What they need besides the files is the same: the :class:`~aitune_core.exported.layout.IOLayout`
between calls and the model's flat tensors (saved as JSON extra state where it can be,
rebuilt from one eager call where it cannot) and the module's forward signature.
:class:`ExportedGraphBackend` keeps those, so a subclass only says how its files are
made and opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from aitune_core.backends.base import Backend, BuildContext
from aitune_core.exported.layout import IOLayout, LayoutNotSerializable, Slot, layout_from_context
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.validation.data_dependent import data_dependent_reason

LAYOUT_KEY = "layout"


class ExportedGraphBackend(Backend):
    """A backend whose artifacts are made from the graph exported flat (see :mod:`aitune_core.exported.flat`).

    A subclass exports in ``_build`` and hands the layout of its export to
    :meth:`_adopt_layout`; opens its files in ``_load`` (after :meth:`_call_layout`);
    names its files in ``_artifact_paths``; and adds its own extra state to what
    :meth:`_restore` and :meth:`_extra_state` keep here. ``_infer`` is
    :meth:`_flatten_call` (the call's flat inputs), the runtime, then
    ``self.layout.rebuild(outputs)``.
    """

    required_artifacts: ClassVar[tuple[str, ...]] = ()
    """The artifacts a checkpoint must hold for :meth:`_restore` to accept it."""
    kept_extra: ClassVar[tuple[str, ...]] = ()
    """Extra-state keys a restored backend has no build to recompute from, so it hands them on as loaded."""

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._layout: IOLayout | None = None
        self._signature: ForwardSignature | None = None
        self._restored_extra: dict[str, Any] = {}
        self._positional: tuple[int, ...] | None = None

    @property
    def is_jit(self) -> bool:
        return False

    @property
    def layout(self) -> IOLayout | None:
        return self._layout

    @property
    def restored_extra(self) -> dict[str, Any]:
        """The extra state a checkpoint restored this backend with (empty for a built one)."""
        return self._restored_extra

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

    def _adopt_layout(self, layout: IOLayout, context: BuildContext) -> None:
        """Take the layout of a build's export, and the module's signature, once its files are made."""
        self._layout = layout
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
        self._positional = _positional_inputs(self._layout, self._signature)
        return self._layout, self._signature

    def _layout_from_context(self) -> IOLayout:
        return layout_from_context(self.describe(), self.context)

    def _activate(self) -> None:
        self._load()

    # ------------------------------------------------------------------ inference
    def inference_callable(self) -> Callable[..., Any]:
        """``_infer``, or where the graph is ``model(x)`` returning one tensor, the runtime's one-tensor call.

        At batch 1 a small model's runtime call takes 0.1-0.2 ms, and each layer of Python
        around it shows: flattening the call, a list per side and rebuilding the output
        cost 10-20 us per call in a process whose model weights stream through the CPU's
        caches on every call (docs/benchmarks.md, "After the one-tensor call").
        A call of any other form still goes through ``_infer``.
        """
        layout = self._layout
        template = layout.template if layout is not None else None
        one = self._one_tensor_call(template.index) if self._positional == (0,) and type(template) is Slot else None
        if one is None:
            return self._infer
        infer = self._infer

        def call(*args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != 1:
                return infer(*args, **kwargs)
            return one(args[0])

        return call

    def _one_tensor_call(self, output: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The runtime called on the graph's one input, returning flat output ``output``; None if it has none.

        Valid from when the runtime is loaded until it is released: routes take it when
        they are activated (see :meth:`Backend.inference_callable`).
        """
        return None

    def _flatten_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        """The flat input tensors of a call, in the export's input order.

        A call that passes exactly the exported tensors by position (``model(x)``, most
        calls) is read straight from ``args``: normalizing it would give the same list.
        """
        positional = self._positional
        if positional is not None and not kwargs and len(args) == len(positional):
            return [args[index] for index in positional]
        layout, signature = self._layout, self._signature
        assert layout is not None and signature is not None, "load the backend before calling it"
        return layout.flatten(signature.normalize(args, kwargs))

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


def _positional_inputs(layout: IOLayout, signature: ForwardSignature) -> tuple[int, ...] | None:
    """For each flat input, its place in a call that passes all of them by position and nothing else.

    None when such a call cannot be read by position alone: the export baked in a
    non-tensor value, a tensor sits inside a container or behind ``*args``, or the
    tensors are not the forward's first positional parameters.
    """
    if layout.constants or signature.signature is None:
        return None
    leading = []
    for parameter in signature.signature.parameters.values():
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            break
        leading.append(parameter.name)
    count = len(layout.inputs)
    if any(locator.keys for locator in layout.inputs) or count > len(leading):
        return None
    place = {name: index for index, name in enumerate(leading[:count])}
    try:
        return tuple(place[locator.root] for locator in layout.inputs)  # type: ignore[index]
    except KeyError:
        return None
