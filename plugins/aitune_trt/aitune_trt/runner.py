"""A call's way through an engine: flatten, pick a profile, feed, run, put the outputs back.

Everything around TensorRT's own execution lives here, against the small
:class:`EngineSession` interface that :class:`aitune_trt.engine.TensorRTEngine`
implements. Keeping TensorRT behind that interface means the orchestration (which
tensor feeds which input, which profile a call takes, dtype and device handling,
rebuilding nested outputs with aitune-onnx's layout) is tested on a CPU with a test
double, and only the thin engine module needs a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from aitune_core.plugin_api import ForwardSignature
from aitune_core.plugin_api.exported import IOLayout
from aitune_trt.profiles import ProfileSelector, TensorRTProfile

TRT_DTYPES: dict[str, torch.dtype] = {
    "FLOAT": torch.float32,
    "HALF": torch.float16,
    "BF16": torch.bfloat16,
    "INT8": torch.int8,
    "UINT8": torch.uint8,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "BOOL": torch.bool,
    "FP8": torch.float8_e4m3fn,
}
"""``trt.DataType`` member name -> torch dtype, for the types an engine's inputs and outputs can have."""


def trt_dtype_name(dtype: torch.dtype) -> str:
    """The ``trt.DataType`` member name of a torch dtype."""
    for name, known in TRT_DTYPES.items():
        if known == dtype:
            return name
    raise TypeError(f"TensorRT has no type for {dtype}")


def torch_dtype(trt_name: str, tensor: str) -> torch.dtype:
    try:
        return TRT_DTYPES[trt_name]
    except KeyError:
        raise TypeError(f"engine tensor {tensor!r} has TensorRT type {trt_name}, which torch cannot hold") from None


class EngineSession(Protocol):
    """What the runner needs from a loaded engine.

    input_names / output_names: the engine's I/O tensors (ONNX names).
    input_dtypes / output_dtypes: their torch dtypes.
    device: where inputs must be and outputs are.
    num_profiles: how many optimization profiles the engine has.
    """

    @property
    def input_names(self) -> Sequence[str]: ...

    @property
    def output_names(self) -> Sequence[str]: ...

    @property
    def input_dtypes(self) -> Mapping[str, torch.dtype]: ...

    @property
    def output_dtypes(self) -> Mapping[str, torch.dtype]: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def num_profiles(self) -> int: ...

    def profile_shapes(self, name: str, index: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """``(min, opt, max)`` of input ``name`` in profile ``index``, as the engine holds them."""
        ...

    def run(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run with profile ``profile`` on ``inputs`` (engine dtypes, on :attr:`device`, contiguous)."""
        ...


class RefittableSession(EngineSession, Protocol):
    """A session whose engine takes new weights by name, and serializes with them."""

    def refit(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace the engine's weights named in ``weights``; raises naming what TensorRT refused."""
        ...

    def serialize(self) -> bytes:
        """The engine's plan as it is now."""
        ...


def check_engine_profiles(session: EngineSession, profiles: Sequence[TensorRTProfile]) -> None:
    """Refuse an engine whose profiles are not the ones recorded beside it.

    A plan and its profiles file come from two artifacts; if they ever disagree, the
    runner's selection would send calls to a profile that does not take them.
    """
    if session.num_profiles != len(profiles):
        raise RuntimeError(
            f"the engine has {session.num_profiles} optimization profiles, but {len(profiles)} are recorded with it"
        )
    for index, profile in enumerate(profiles):
        for name in session.input_names:
            try:
                entry = profile.entry(name)
            except KeyError:
                raise RuntimeError(f"engine input {name!r} is not in recorded profile {index}") from None
            expected = (entry.min, entry.opt, entry.max)
            found = tuple(tuple(int(size) for size in shape) for shape in session.profile_shapes(name, index))
            if found != expected:
                raise RuntimeError(
                    f"profile {index} of the engine gives input {name!r} min/opt/max {found}, the recorded profile "
                    f"{expected}"
                )


class TensorRTRunner:
    """Runs calls, given as the module was called, through an :class:`EngineSession`.

    layout: aitune-onnx's layout of the exported model (flat inputs, nested outputs).
    signature: the module's forward signature, to normalize calls.
    profiles: the engine's profiles, in the engine's order.
    output_dtypes: the recorded dtype of each output (layout order); outputs the engine
        returns in another dtype are cast back, so callers see what eager returns.
    """

    def __init__(
        self,
        layout: IOLayout,
        signature: ForwardSignature,
        profiles: Sequence[TensorRTProfile],
        session: EngineSession,
        output_dtypes: Sequence[torch.dtype | None] | None = None,
    ) -> None:
        check_engine_profiles(session, profiles)
        unknown = [name for name in session.input_names if name not in layout.input_names]
        if unknown:
            raise RuntimeError(f"the engine has inputs {unknown} that the exported model's layout does not")
        missing = [name for name in layout.output_names if name not in session.output_names]
        if missing:
            raise RuntimeError(f"the engine lacks outputs {missing} of the exported model")
        self.layout = layout
        self.signature = signature
        self.session = session
        self.selector = ProfileSelector(profiles, layout.input_names)
        present = set(session.input_names)
        self._feeds = [
            (position, name, session.input_dtypes[name])
            for position, name in enumerate(layout.input_names)
            if name in present
        ]
        dtypes = list(output_dtypes) if output_dtypes is not None else [None] * len(layout.output_names)
        self._outputs = [
            (name, wanted if wanted is not None and wanted != session.output_dtypes[name] else None)
            for name, wanted in zip(layout.output_names, dtypes, strict=True)
        ]
        self.last_profile: int | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = self.layout.flatten(self.signature.normalize(args, kwargs))
        profile = self.selector.select([tensor.shape for tensor in tensors])
        device = self.session.device
        feed = {}
        for position, name, dtype in self._feeds:
            tensor = tensors[position]
            if tensor.device != device or tensor.dtype != dtype:
                tensor = tensor.to(device=device, dtype=dtype)
            if not tensor.is_contiguous():
                tensor = tensor.contiguous()
            feed[name] = tensor
        self.last_profile = profile
        produced = self.session.run(profile, feed)
        flat = []
        for name, cast in self._outputs:
            tensor = produced[name]
            flat.append(tensor if cast is None else tensor.to(cast))
        return self.layout.rebuild(flat)
