"""GraphSpec: one execution graph of a module, as learned from the calls recorded for it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs

from aitune_core.graphs.declared_dims import DeclaredRange
from aitune_core.metadata.sample_metadata import SampleMetadata, ShapeChoice


@attrs.define(eq=False)
class GraphSpec:
    """Name, input and output metadata of a graph, and the key that routes calls to it.

    ``str()`` prints the name and both tables, as the tuning logs show them.
    """

    name: str
    input_spec: SampleMetadata
    output_spec: SampleMetadata
    key: tuple[Hashable, ...] = attrs.field(repr=False, default=())
    declared: list[DeclaredRange] = attrs.field(repr=False, factory=list)
    """The ranges the user declared (``dynamic_shapes``), already applied to ``input_spec``."""

    def shapes(self, which: ShapeChoice) -> dict[str, list[int]]:
        """The min, opt or max shape of every input tensor, keyed by access path."""
        result = {}
        for locator, spec in self.input_spec.tensor_data:
            result[locator.display_path] = {
                "min": spec.min_shape,
                "opt": spec.opt_shape,
                "max": spec.max_shape,
            }[which]
        return result

    @property
    def declares_batch(self) -> bool:
        """Whether the user declared the batch range, which then bounds it (no search beyond)."""
        return any(declared.name == "batch" for declared in self.declared)

    @property
    def batch_range(self) -> tuple[int, int] | None:
        return self.input_spec.batch_range()

    def describe(self) -> str:
        return f"Name={self.name}\nInput_spec:\n{self.input_spec!r}\nOutput_spec:\n{self.output_spec!r}"

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"GraphSpec(name={self.name!r})"


@attrs.define(eq=False)
class Sample:
    """One recorded call: its normalised arguments (kept on the CPU) and batch size."""

    arguments: dict[str, Any]
    batch_size: int | None = None
