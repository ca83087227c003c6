"""Recording calls of a wrapped module into graphs.

Metadata is taken *before* the forward runs, because the forward may change its
inputs in place; the stored sample is a CPU copy taken at the same moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from aitune_core.config import config
from aitune_core.context import current_batch_size
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.graphs.keying import graph_key
from aitune_core.log import get_logger
from aitune_core.metadata.copies import owned_copy
from aitune_core.metadata.leaf_key import leaf_value_key
from aitune_core.metadata.locator import Locator
from aitune_core.metadata.sample_metadata import SampleMetadata


def copy_to_host(value: Any) -> Any:
    """A copy of a call's arguments that the forward cannot mutate, kept off the accelerator.

    Objects aitune cannot look into (a cache, a user object) are deep-copied, so a
    forward that changes them later leaves the stored sample as it was recorded.
    """
    return owned_copy(value, "cpu")


class GraphRecord:
    """A graph and the samples kept for it."""

    __slots__ = ("samples", "spec")

    def __init__(self, spec: GraphSpec) -> None:
        self.spec = spec
        self.samples: list[Sample] = []


class _ThreadCalls(threading.local):
    count = 0


class GraphRecorder:
    """Turns calls into graphs: keys them, widens their specs and keeps a few samples."""

    def __init__(
        self,
        module_name: str,
        signature: ForwardSignature,
        key_parts: Callable[[dict[str, Any]], Hashable] | None = None,
    ) -> None:
        self.module_name = module_name
        self.signature = signature
        self.graphs: dict[Hashable, GraphRecord] = {}
        self._key_parts = key_parts
        self._values_seen: dict[Locator, set[Hashable]] = {}
        self._capped: set[Locator] = set()
        self._log = get_logger(module=module_name)
        self.calls = 0
        self._thread_calls = _ThreadCalls()

    @property
    def thread_calls(self) -> int:
        """Calls recorded by the calling thread: a tuning run counts its own, not another thread's."""
        return self._thread_calls.count

    @property
    def graph_specs(self) -> list[GraphSpec]:
        return [record.spec for record in self.graphs.values()]

    @property
    def key_parts(self) -> Callable[[dict[str, Any]], Hashable] | None:
        """What the plugins add to every graph key, or None when none of them adds anything."""
        return self._key_parts

    def key(self, arguments: dict[str, Any], strict: bool) -> tuple[Hashable, ...]:
        return call_key(arguments, strict, self._key_parts)

    def record(self, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        self._thread_calls.count += 1
        arguments = self.signature.normalize(args, kwargs)
        strict = config.strict_mode
        batch_size = current_batch_size()
        inputs = SampleMetadata.from_inputs(arguments, strict=strict, batch_size=batch_size)
        key = self.key(arguments, strict)
        record = self.graphs.get(key)
        if record is None and strict and self._over_value_limit(inputs):
            return forward(*args, **kwargs)
        keep = (
            record is None or len(record.samples) < config.max_num_samples_stored or _new_batch_size(record, batch_size)
        )
        sample = Sample(copy_to_host(arguments), batch_size) if keep else None
        try:
            outputs = forward(*args, **kwargs)
        except Exception as error:
            graph = record.spec.name if record is not None else str(len(self.graphs))
            error.add_note(f"raised by the forward of aitune module `{self.module_name}` while recording graph {graph}")
            raise
        output_meta = SampleMetadata.from_outputs(outputs, strict=False, batch_size=batch_size)
        if record is None:
            spec = GraphSpec(str(len(self.graphs)), inputs, output_meta, key)
            record = GraphRecord(spec)
            self.graphs[key] = record
            self._log.debug("graph detected", graph=spec.name)
        else:
            self._widen(record, inputs, output_meta)
        if sample is not None:
            record.samples.append(sample)
        return outputs

    def _widen(self, record: GraphRecord, inputs: SampleMetadata, outputs: SampleMetadata) -> None:
        record.spec.input_spec.update_shapes_seen(inputs)
        try:
            record.spec.output_spec.update_shapes_seen(outputs)
        except ValueError as error:
            raise ValueError(
                f"aitune module `{self.module_name}`, graph {record.spec.name}: the same input structure "
                f"returned a different output structure ({error})"
            ) from error

    def _over_value_limit(self, inputs: SampleMetadata) -> bool:
        """Whether this call's non-tensor values would push an argument past the limit.

        Values already seen never count: only a *new* value for an argument that has
        had ``max_distinct_values_per_argument`` of them is refused.
        """
        limit = config.max_distinct_values_per_argument
        new_values: list[tuple[Locator, Hashable]] = []
        for locator, value in inputs.other_data:
            value_key = leaf_value_key(value)
            seen = self._values_seen.setdefault(locator, set())
            if value_key in seen:
                continue
            if len(seen) >= limit:
                if locator not in self._capped:
                    self._capped.add(locator)
                    self._log.warning(
                        "argument takes too many values",
                        argument=locator.display_path,
                        limit=limit,
                        hint=(
                            f"`{locator.display_path}` took more than {limit} distinct values; calls with new "
                            "values run eagerly instead of creating graphs. Pass it as a tensor, raise "
                            "config.max_distinct_values_per_argument, or set config.strict_mode = False"
                        ),
                    )
                return True
            new_values.append((locator, value_key))
        for locator, value_key in new_values:
            self._values_seen[locator].add(value_key)
        return False


def call_key(
    arguments: dict[str, Any], strict: bool, key_parts: Callable[[dict[str, Any]], Hashable] | None
) -> tuple[Hashable, ...]:
    """The graph key of a normalized call, with the plugins' part when they give one."""
    key = graph_key(arguments, strict)
    if key_parts is not None:
        extra = key_parts(arguments)
        if extra is not None:
            key = (*key, ("plugin", extra))
    return key


MAX_BATCH_SIZE_SAMPLES = 16
"""Beyond ``max_num_samples_stored``, one sample is kept per new batch size, up to this many more."""


def _new_batch_size(record: GraphRecord, batch_size: int | None) -> bool:
    """Whether a call brings a batch size the graph has no sample of: validation checks each one tuned with."""
    if batch_size is None or len(record.samples) >= config.max_num_samples_stored + MAX_BATCH_SIZE_SAMPLES:
        return False
    return all(sample.batch_size != batch_size for sample in record.samples)
