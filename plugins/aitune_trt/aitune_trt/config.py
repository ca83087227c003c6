"""The TensorRT backend's config: precision, builder settings, profiles, runtime and export options.

One flat attrs class, so that users write ``TensorRTBackend(precision="fp16",
workspace_bytes=4 << 30)`` and checkpoints store plain values; everything is checked
when the config is made, before an export or a build is spent on it. Profiles given
here are checked against the recorded inputs at build time, when those are known
(:func:`aitune_trt.profiles.config_profiles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from aitune_onnx.exported_graph import ExportedGraphConfig
from aitune_trt.precision import PRECISIONS
from aitune_trt.profiles import PROFILE_SOURCES, ShapeRange


def _profiles(value: Any) -> tuple[dict[str, ShapeRange], ...]:
    """Profiles as ``({access path: ShapeRange}, ...)``; each range may be given as ``(min, opt, max)``."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        raise TypeError("profiles is a list of dicts (one per profile), each keyed by access path; got one dict")
    result = []
    for profile in value:
        if not isinstance(profile, Mapping):
            raise TypeError(f"each profile is a dict keyed by access path, got {type(profile).__name__}")
        for path in profile:
            if not isinstance(path, str):
                raise TypeError(f"profiles are keyed by access path (str), got {path!r}")
        result.append({path: ShapeRange.of(shapes) for path, shapes in profile.items()})
    return tuple(result)


def _optional_int(low: int, high: int | None = None) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f">= {low}"
            raise ValueError(f"{attribute.name} must be a whole number {bounds}, got {value!r}")

    return check


def _positive(_instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a whole number >= 1, got {value!r}")


@attrs.frozen
class TensorRTBackendConfig(ExportedGraphConfig):
    """Settings of :class:`~aitune_trt.TensorRTBackend`.

    precision: ``"fp32"``, ``"fp16"`` or ``"bf16"``; see :mod:`aitune_trt.precision`.
    strongly_typed: None picks for the installed TensorRT (builder flags where it has
        them, strong typing on TensorRT 11); True builds a strongly typed network from
        a model exported in the precision; False insists on builder flags.
    tf32: allow TF32 math for float32 layers (TensorRT enables it by default; off here
        so that fp32 engines match eager float32 within the default tolerances).
    workspace_bytes: limit of TensorRT's workspace memory pool; None: TensorRT's default.
    optimization_level: ``builder_optimization_level``, 0 (fast builds) to 5 (slow
        builds, faster engines); None: TensorRT's default (3).
    profile_source: ``"graph"`` (one profile over the graph's min/opt/max),
        ``"samples"`` (one per distinct recorded shape) or ``"config"`` (``profiles``);
        None: ``"config"`` when ``profiles`` are given, else ``"graph"``.
    profiles: optimization profiles, each ``{access path: (min, opt, max)}`` naming
        every recorded input (``{"x": ([1, 8], [4, 8], [8, 8])}``).
    cover_tuned_range: add the graph's own profile after the sample or config ones, so
        every call in the tuned range has a profile.
    max_sample_profiles: the most profiles ``"samples"`` may make.
    cuda_graphs: replay each (profile, input shapes) as a captured CUDA graph.
    refittable: build the engine with ``BuilderFlag.REFIT``, so that it takes new weights
        without a rebuild (:meth:`~aitune_trt.TensorRTBackend.refit`). Off by default:
        TensorRT optimizes a refittable engine less, and documents numerical differences
        for some of them even when they are never refitted.
    exporter, torchscript_fallback, opset_version, optimize, external_data: how the
        graph is exported to ONNX; see :class:`aitune_onnx.exported_graph.ExportedGraphConfig`.
    """

    precision: str = attrs.field(default="fp32", validator=attrs.validators.in_(PRECISIONS))
    strongly_typed: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(bool))
    )
    tf32: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    workspace_bytes: int | None = attrs.field(default=None, validator=_optional_int(1))
    optimization_level: int | None = attrs.field(default=None, validator=_optional_int(0, 5))
    profile_source: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(PROFILE_SOURCES))
    )
    profiles: tuple[dict[str, ShapeRange], ...] = attrs.field(default=(), converter=_profiles)
    cover_tuned_range: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    max_sample_profiles: int = attrs.field(default=8, validator=_positive)
    cuda_graphs: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    refittable: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.profile_source == "config" and not self.profiles:
            raise ValueError("profile_source='config' needs at least one profile in `profiles`")
        if self.profiles and self.profile_source not in (None, "config"):
            raise ValueError(f"profiles are given, but profile_source={self.profile_source!r} would ignore them")

    @property
    def resolved_profile_source(self) -> str:
        if self.profile_source is not None:
            return self.profile_source
        return "config" if self.profiles else "graph"
