"""What a TensorRT build takes besides the ONNX file, and what it gives back.

Plain attrs classes, apart from :mod:`aitune_trt.engine`, so that the backend can
prepare a build, and tests can check what it prepared, without TensorRT.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from aitune_trt.precision import PrecisionPlan
from aitune_trt.profiles import TensorRTProfile


@attrs.frozen
class BuildOptions:
    """Everything a build takes besides the ONNX file.

    profiles: the optimization profiles, in the order the engine will number them.
    precision: flags, network typing and export dtype (:func:`aitune_trt.precision.plan_precision`).
    workspace_bytes: the workspace memory pool limit; None leaves TensorRT's default.
    optimization_level: ``builder_optimization_level`` (0-5); None leaves TensorRT's (3).
    timing_cache: the file the timing cache is read from and written back to; None: no cache.
    refittable: build with ``BuilderFlag.REFIT``, so that a ``trt.Refitter`` can replace the weights.
    """

    profiles: tuple[TensorRTProfile, ...]
    precision: PrecisionPlan
    workspace_bytes: int | None = None
    optimization_level: int | None = None
    timing_cache: Path | None = None
    refittable: bool = False


@attrs.frozen
class BuildResult:
    """A serialized engine (plan), what TensorRT logged at warning level and above, and its version."""

    plan: bytes
    messages: tuple[tuple[str, str], ...]
    version: str
