"""TensorRT optimization profiles: for every input, the smallest, typical and largest shape.

A TensorRT engine only runs shapes inside one of the optimization profiles it was
built with, and it picks its kernels for each profile's ``opt`` shape. The profiles
therefore decide both what the engine accepts and what it is fast at. They are made
here, in plain Python, from what aitune recorded:

* ``"graph"`` (the default): one profile spanning the graph spec's min, opt and max,
  so every call the router lets through has a profile;
* ``"samples"``: one profile per distinct shape of the recorded samples (min = opt =
  max), for kernels tuned to exactly the shapes the workload uses;
* ``"config"``: profiles the user writes in the backend config, keyed by access path,
  checked against the recorded inputs before any export or build starts.

With ``cover_tuned_range`` (the default) the graph's own profile is added after the
sample or config profiles, so that a call between them still has a profile. A call
takes the first profile, in order, that contains all of its shapes
(:class:`ProfileSelector`); one that fits none raises :class:`OutOfProfileError`
instead of reaching the engine.

Inputs are named twice: by access path (``values[1]["pairs"]``), which is what users
and aitune's tables show, and by ONNX input name (``values_1_pairs``), which is what
TensorRT knows. The names follow aitune-onnx's rule, so they are the exported model's.
Profiles are attrs classes and go to JSON with cattrs for checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import cattrs

from aitune_core.plugin_api import GraphSpec, Sample, TensorSpec
from aitune_core.plugin_api.exported import unique_names

PROFILE_SOURCES = ("graph", "samples", "config")
PROFILES_FORMAT = 1

Shape = tuple[int, ...]


class ProfileError(ValueError):
    """Profiles given in the config do not fit the recorded inputs."""


class OutOfProfileError(ValueError):
    """A call's shapes are in none of the engine's optimization profiles.

    aitune's routing sends calls outside the tuned range to eager before they get
    here; this is raised for calls inside that range that the configured profiles do
    not cover (``cover_tuned_range=False``), so that TensorRT never runs them.
    """


def _shape(value: Any) -> Shape:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"a shape is a sequence of whole numbers, got {value!r}")
    sizes = []
    for size in value:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"a shape is a sequence of whole numbers, got {list(value)!r}")
        sizes.append(int(size))
    return tuple(sizes)


@attrs.frozen
class ShapeRange:
    """The ``min``, ``opt`` and ``max`` shape of one input, as a config gives them."""

    min: Shape = attrs.field(converter=_shape)
    opt: Shape = attrs.field(converter=_shape)
    max: Shape = attrs.field(converter=_shape)

    @classmethod
    def of(cls, value: Any) -> ShapeRange:
        """A range from a ``ShapeRange``, a ``(min, opt, max)`` triple or a dict with those keys."""
        if isinstance(value, ShapeRange):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"min", "opt", "max"})
            if unknown or len(value) != 3:
                raise TypeError(f"a shape range dict has exactly the keys min, opt and max, got {sorted(value)}")
            return cls(value["min"], value["opt"], value["max"])
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 3:
            return cls(value[0], value[1], value[2])
        raise TypeError(f"a shape range is (min, opt, max) or a dict with those keys, got {value!r}")


@attrs.frozen
class ProfileInput:
    """One input of a profile: its access path, its ONNX input name and its three shapes."""

    path: str
    name: str
    min: Shape = attrs.field(converter=_shape)
    opt: Shape = attrs.field(converter=_shape)
    max: Shape = attrs.field(converter=_shape)

    def contains(self, shape: Sequence[int]) -> bool:
        if len(shape) != len(self.min):
            return False
        return all(low <= size <= high for size, low, high in zip(shape, self.min, self.max, strict=True))

    def describe(self) -> str:
        if self.min == self.max:
            return f"{self.path}={list(self.min)}"
        return f"{self.path}={list(self.min)}..{list(self.opt)}..{list(self.max)}"


def _entries(value: Iterable[ProfileInput]) -> tuple[ProfileInput, ...]:
    return tuple(value)


@attrs.frozen
class TensorRTProfile:
    """One optimization profile: a shape range for every input of the graph, in input order.

    source: where it came from, ``"graph"``, ``"sample"`` or ``"config"``.
    """

    inputs: tuple[ProfileInput, ...] = attrs.field(converter=_entries)
    source: str = "graph"

    @property
    def names(self) -> dict[str, str]:
        """Access path -> ONNX input name."""
        return {entry.path: entry.name for entry in self.inputs}

    def entry(self, name: str) -> ProfileInput:
        """The input with ONNX name ``name``."""
        for item in self.inputs:
            if item.name == name:
                return item
        raise KeyError(name)

    def same_shapes(self, other: TensorRTProfile) -> bool:
        return [(e.name, e.min, e.opt, e.max) for e in self.inputs] == [
            (e.name, e.min, e.opt, e.max) for e in other.inputs
        ]

    def renamed(self, names: Mapping[str, str]) -> TensorRTProfile:
        """This profile with ONNX names taken from ``names`` (access path -> name)."""
        return attrs.evolve(self, inputs=tuple(attrs.evolve(e, name=names.get(e.path, e.name)) for e in self.inputs))

    def describe(self) -> str:
        return f"{self.source}: " + ", ".join(entry.describe() for entry in self.inputs)


# ---------------------------------------------------------------------- making profiles
def input_names(graph: GraphSpec) -> dict[str, str]:
    """Access path -> ONNX input name, by aitune-onnx's naming rule, for every recorded input."""
    paths = [locator.display_path for locator in graph.input_spec.locators]
    return dict(zip(paths, unique_names(paths), strict=True))


def graph_profile(graph: GraphSpec) -> TensorRTProfile:
    """The graph spec's min, opt and max for every input: the profile every call in range fits."""
    names = input_names(graph)
    return TensorRTProfile(
        tuple(
            ProfileInput(
                locator.display_path,
                names[locator.display_path],
                spec.min_shape,
                spec.opt_shape,
                spec.max_shape,
            )
            for locator, spec in graph.input_spec.tensor_data
        ),
        source="graph",
    )


def sample_profiles(graph: GraphSpec, samples: Sequence[Sample], limit: int) -> list[TensorRTProfile]:
    """One fixed-shape profile per distinct combination of input shapes among ``samples``, in recording order.

    limit: the most profiles to make; more distinct shapes raise :class:`ProfileError`,
        since every profile costs build time and engine size.
    """
    names = input_names(graph)
    locators = graph.input_spec.locators
    seen: dict[tuple[Shape, ...], None] = {}
    for sample in samples:
        seen.setdefault(tuple(tuple(locator.get(sample.arguments).shape) for locator in locators), None)
    if len(seen) > limit:
        raise ProfileError(
            f"graph {graph.name} has {len(seen)} distinct recorded shapes, more than max_sample_profiles={limit}; "
            "raise max_sample_profiles or use profile_source='graph'"
        )
    return [
        TensorRTProfile(
            tuple(
                ProfileInput(locator.display_path, names[locator.display_path], shape, shape, shape)
                for locator, shape in zip(locators, shapes, strict=True)
            ),
            source="sample",
        )
        for shapes in seen
    ]


def config_profiles(graph: GraphSpec, given: Sequence[Mapping[str, ShapeRange]]) -> list[TensorRTProfile]:
    """Profiles written in the config, checked against the recorded inputs.

    Each must name every recorded input by access path and nothing else, with the
    recorded rank, ``min <= opt <= max`` on every axis, no negative size, and the
    recorded size on every static axis. The error names the profile, the input, the
    axis and both values.
    """
    names = input_names(graph)
    specs: dict[str, TensorSpec] = {locator.display_path: spec for locator, spec in graph.input_spec.tensor_data}
    profiles = []
    for index, ranges in enumerate(given):
        where = f"profile {index}"
        unknown = [path for path in ranges if path not in specs]
        if unknown:
            raise ProfileError(f"{where}: {_unknown_paths(unknown, names)}; the recorded inputs are {_paths(specs)}")
        missing = [path for path in specs if path not in ranges]
        if missing:
            raise ProfileError(
                f"{where}: no shapes for recorded input {_paths(missing)}; a profile gives every input's min, opt "
                "and max"
            )
        entries = []
        for path, spec in specs.items():
            shape_range = ShapeRange.of(ranges[path])
            _check_range(f"{where}, `{path}`", shape_range, spec)
            entries.append(ProfileInput(path, names[path], shape_range.min, shape_range.opt, shape_range.max))
        profiles.append(TensorRTProfile(tuple(entries), source="config"))
    return profiles


def _paths(paths: Any) -> str:
    return ", ".join(f"`{path}`" for path in paths)


def _unknown_paths(unknown: list[str], names: dict[str, str]) -> str:
    by_name = {name: path for path, name in names.items()}
    parts = []
    for path in unknown:
        hint = f" (the ONNX name of `{by_name[path]}`; profiles are keyed by access path)" if path in by_name else ""
        parts.append(f"`{path}`{hint}")
    return f"unknown input path {', '.join(parts)}"


def _check_range(where: str, shape_range: ShapeRange, spec: TensorSpec) -> None:
    for label, shape in (("min", shape_range.min), ("opt", shape_range.opt), ("max", shape_range.max)):
        if len(shape) != spec.rank:
            raise ProfileError(
                f"{where}: {label} shape {list(shape)} has rank {len(shape)}, but the input was recorded with rank "
                f"{spec.rank} (shape {spec.shape})"
            )
        negative = [axis for axis, size in enumerate(shape) if size < 0]
        if negative:
            raise ProfileError(f"{where}: {label} shape {list(shape)} has a negative size on axis {negative[0]}")
    for axis in range(spec.rank):
        low, opt, high = shape_range.min[axis], shape_range.opt[axis], shape_range.max[axis]
        if not low <= opt <= high:
            raise ProfileError(f"{where}: axis {axis} needs min <= opt <= max, got {low}, {opt}, {high}")
        recorded_low, recorded_high = spec.min_shape[axis], spec.max_shape[axis]
        if recorded_low == recorded_high and not low == opt == high == recorded_low:
            raise ProfileError(
                f"{where}: axis {axis} is static, always {recorded_low} in the recorded calls, but the profile gives "
                f"{low}, {opt}, {high}; a static axis keeps its recorded size"
            )


def resolve_profiles(
    source: str,
    graph: GraphSpec,
    samples: Sequence[Sample],
    given: Sequence[Mapping[str, ShapeRange]] = (),
    cover_tuned_range: bool = True,
    max_sample_profiles: int = 8,
) -> list[TensorRTProfile]:
    """The profiles an engine for ``graph`` is built with, in selection order, without duplicates."""
    if source == "graph":
        profiles = [graph_profile(graph)]
    elif source == "samples":
        profiles = sample_profiles(graph, samples, max_sample_profiles)
    elif source == "config":
        if not given:
            raise ProfileError("profile_source='config' needs at least one profile in `profiles`")
        profiles = config_profiles(graph, given)
    else:
        raise ProfileError(f"profile_source must be one of {', '.join(PROFILE_SOURCES)}, got {source!r}")
    if cover_tuned_range and source != "graph":
        profiles.append(graph_profile(graph))
    unique: list[TensorRTProfile] = []
    for profile in profiles:
        if not any(profile.same_shapes(kept) for kept in unique):
            unique.append(profile)
    return unique


# ---------------------------------------------------------------------- choosing one per call
class ProfileSelector:
    """Picks, for a call's input shapes, the first profile that contains them all.

    names: the ONNX input names in the order the call's tensors come (the layout's
    order). Everything is laid out once, so a call costs a few integer comparisons per
    profile tried.
    """

    def __init__(self, profiles: Sequence[TensorRTProfile], names: Sequence[str]) -> None:
        if not profiles:
            raise ValueError("an engine needs at least one optimization profile")
        self.profiles = list(profiles)
        self.names = list(names)
        self._bounds: list[list[tuple[int, Shape, Shape]]] = []
        for number, profile in enumerate(self.profiles):
            entries = {entry.name: entry for entry in profile.inputs}
            missing = [name for name in self.names if name not in entries]
            if missing:
                raise ValueError(f"profile {number} has no shapes for input {', '.join(missing)}")
            self._bounds.append(
                [(position, entries[name].min, entries[name].max) for position, name in enumerate(self.names)]
            )

    def select(self, shapes: Sequence[Sequence[int]]) -> int:
        """The index of the profile for a call whose tensors have ``shapes``, in ``names`` order."""
        for index, bounds in enumerate(self._bounds):
            if all(_within(shapes[position], low, high) for position, low, high in bounds):
                return index
        raise OutOfProfileError(self._explain(shapes))

    def _explain(self, shapes: Sequence[Sequence[int]]) -> str:
        call = ", ".join(
            f"{entry.path}={list(shapes[position])}"
            for position, entry in enumerate(self.profiles[0].entry(name) for name in self.names)
        )
        reasons = []
        for number, profile in enumerate(self.profiles):
            for position, name in enumerate(self.names):
                entry = profile.entry(name)
                if not entry.contains(shapes[position]):
                    reasons.append(f"profile {number} ({profile.source}) takes {entry.describe()}")
                    break
        return f"no optimization profile of this engine takes the call's shapes ({call}): " + "; ".join(reasons)


def _within(shape: Sequence[int], low: Shape, high: Shape) -> bool:
    if len(shape) != len(low):
        return False
    return all(lo <= size <= hi for size, lo, hi in zip(shape, low, high, strict=True))


# ---------------------------------------------------------------------- persistence
_converter = cattrs.Converter()


def profiles_to_json(profiles: Sequence[TensorRTProfile]) -> str:
    """JSON text of ``profiles``, as a checkpoint stores them next to the engine."""
    payload = {"format": PROFILES_FORMAT, "profiles": _converter.unstructure(list(profiles), list[TensorRTProfile])}
    return json.dumps(payload, indent=1)


def profiles_from_json(text: str) -> list[TensorRTProfile]:
    payload = json.loads(text)
    if not isinstance(payload, dict) or payload.get("format") != PROFILES_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"profiles file has format {found!r}; this aitune-trt reads format {PROFILES_FORMAT}")
    return _converter.structure(payload["profiles"], list[TensorRTProfile])
