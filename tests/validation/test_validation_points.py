"""Which points a candidate is checked at, the data of each call, and the comparisons made there."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from validation_backends import MLP

from aitune_core.backends.tolerances import Tolerances
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.metadata.locator import walk_inputs
from aitune_core.module.recorder import GraphRecorder
from aitune_core.validation.compare import compare_outputs
from aitune_core.validation.isolation import bitwise_equal, fresh_copy
from aitune_core.validation.points import validation_batch_sizes, validation_points
from aitune_core.validation.reference import EagerReference

CPU = torch.device("cpu")


def record(model: torch.nn.Module, calls: list[tuple[int, torch.Tensor]]) -> tuple[GraphSpec, list[Sample]]:
    recorder = GraphRecorder("points", ForwardSignature(model.forward))
    for batch_size, x in calls:
        with global_context:
            global_context.set(BATCH_SIZE_KEY, batch_size)
            recorder.record(model, (x,), {})
    (graph,) = recorder.graphs.values()
    return graph.spec, graph.samples


def tensors(arguments: dict[str, Any]) -> list[torch.Tensor]:
    return [leaf for _, leaf in walk_inputs(arguments) if isinstance(leaf, torch.Tensor)]


def floats_at(*batches: int) -> list[tuple[int, torch.Tensor]]:
    return [(b, torch.randn(b, 16)) for b in batches]


@pytest.mark.parametrize(
    ("batches", "expected"),
    [
        ((1, 2, 4, 8), [1, 2, 3, 4, 7, 8]),
        ((1, 8), [1, 2, 3, 4, 7, 8]),
        ((1, 2), [1, 2]),
        ((2, 4), [2, 3, 4]),
        ((1, 6, 16), [1, 2, 3, 4, 6, 8, 15, 16]),
        ((1, 64), [1, 2, 3, 4, 8, 16, 32, 63, 64]),
    ],
)
def test_batch_sizes_cover_the_ends_powers_of_two_recorded_sizes_and_odd_inner_points(batches, expected):
    graph, samples = record(MLP(), floats_at(*batches))
    assert validation_batch_sizes(graph, samples) == expected


def test_every_stored_sample_and_batch_size_is_a_point_called_twice_with_different_data():
    graph, samples = record(MLP(), floats_at(1, 1, 1, 1, 2, 4, 8))
    points = validation_points(graph, samples)
    labels = [point.label for point in points]
    assert labels[:4] == [f"batch 1, sample {i}" for i in range(4)]
    assert [sample.batch_size for sample in samples] == [1, 1, 1, 1, 2, 4, 8]
    batches = {label.split(",")[0] for label in labels}
    assert batches == {"batch 1", "batch 2", "batch 3", "batch 4", "batch 7", "batch 8"}
    for point in points:
        first, second = (tensors(call)[0] for call in point.calls)
        assert first.shape == second.shape and not torch.equal(first, second), point.label
    assert torch.equal(tensors(points[0].calls[0])[0], samples[0].arguments["x"])


def test_batches_stack_rows_of_different_samples():
    graph, samples = record(MLP(), floats_at(1, 1, 1, 1, 8))
    (point,) = [p for p in validation_points(graph, samples) if p.label.startswith("batch 4,")]
    rows = tensors(point.calls[0])[0]
    assert len({tuple(row.tolist()) for row in rows}) == 4


def test_one_sample_of_token_ids_still_gets_a_second_call_with_valid_ids():
    class Embed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(50, 4)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.table(ids)

    ids = torch.arange(12).reshape(1, 12)
    graph, samples = record(Embed(), [(1, ids)])
    (point,) = validation_points(graph, samples)
    first, second = (call["ids"] for call in point.calls)
    assert not torch.equal(first, second) and set(second.flatten().tolist()) == set(first.flatten().tolist())


def test_points_own_their_data():
    graph, samples = record(MLP(), floats_at(1, 2))
    points = validation_points(graph, samples)
    stored = {id(t) for sample in samples for t in tensors(sample.arguments)}
    assert all(id(t) not in stored for point in points for call in point.calls for t in tensors(call))


def test_bitwise_equality_tells_nan_payloads_and_signed_zeros_apart():
    a = torch.tensor([0.0, float("nan"), 1.0])
    assert bitwise_equal(a, a.clone())
    assert not bitwise_equal(a, torch.tensor([-0.0, float("nan"), 1.0]))
    assert not bitwise_equal(a, a.double())
    copy = fresh_copy({"x": a})["x"]
    assert copy is not a and bitwise_equal(copy, a)


def problem(got: object, want: object) -> str:
    return compare_outputs(got, want, Tolerances()).problem or ""


def test_nan_and_infinity_must_sit_exactly_where_eager_has_them():
    eager = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert problem(eager.clone(), eager) == ""
    finite_where_nan = torch.tensor([1.0, 5.0, float("inf"), 2.0])
    assert "where eager is NaN or infinite, at 1 of 4" in problem(finite_where_nan, eager)
    wrong_sign = torch.tensor([1.0, float("nan"), -float("inf"), 2.0])
    assert "first at flat index 2" in problem(wrong_sign, eager)
    nan_where_finite = torch.tensor([float("nan"), float("nan"), float("inf"), 2.0])
    assert "NaN or infinite values where eager is finite" in problem(nan_where_finite, eager)
    assert problem(3.0, math.nan) == "`output` is 3.0, eager gives nan"
    assert problem(math.nan, math.nan) == ""


class NanColumns(torch.nn.Module):
    """Doubles its input, with NaN in its first ``columns`` output columns."""

    def __init__(self, columns: int) -> None:
        super().__init__()
        self.columns = columns

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y[:, : self.columns] = float("nan")
        return y


def test_eager_outputs_with_one_finite_column_are_compared_there_and_by_nan_position():
    model = NanColumns(3)
    graph, samples = record(model, floats_at(1, 2))
    reference = EagerReference(model, validation_points(graph, samples), ForwardSignature(model.forward), CPU)
    assert reference.validate(model, Tolerances()).passed
    off_by_half = reference.validate(lambda x: model(x) * 1.5, Tolerances())
    assert "`output` differs from eager: max abs error" in off_by_half.reason

    def finite_where_eager_is_nan(x: torch.Tensor) -> torch.Tensor:
        return model(x).nan_to_num(0.0)

    assert "where eager is NaN or infinite" in reference.validate(finite_where_eager_is_nan, Tolerances()).reason


def test_eager_outputs_without_a_finite_value_fail_every_candidate_naming_the_fix():
    model = NanColumns(16)  # every column
    graph, samples = record(model, floats_at(1, 2))
    points = validation_points(graph, samples)
    reference = EagerReference(model, points, ForwardSignature(model.forward), CPU, "graph 0 of module `m`")
    result = reference.validate(model, Tolerances())
    assert not result.passed and result.calls == 0
    assert result.reason.startswith(
        "eager's outputs of graph 0 of module `m` are all NaN or infinite on the tuning data"
    )


def test_complex_outputs_compare_both_parts():
    eager = torch.tensor([1 + 1j, 2 - 1j])
    assert problem(eager.clone(), eager) == ""
    assert "differs from eager" in problem(eager.conj(), eager)


def test_an_input_eager_itself_writes_must_be_written_the_same_way():
    class AddsInPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1.0)

    model = AddsInPlace()
    graph, samples = record(model, floats_at(1, 2))
    reference = EagerReference(model, validation_points(graph, samples), ForwardSignature(model.forward), CPU)
    assert reference.validate(model, Tolerances()).passed

    def adds_elsewhere(x: torch.Tensor) -> torch.Tensor:
        return x.clone().add_(1.0)

    result = reference.validate(adds_elsewhere, Tolerances())
    assert not result.passed and "input `x`, which eager changes in place, is not changed the same way" in result.reason


def test_eager_failing_on_a_generated_point_drops_it_but_a_recorded_sample_is_an_error():
    class AtMostFour(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 4:
                raise ValueError("too large")
            return x * 2

    model = AtMostFour()
    graph, samples = record(model, floats_at(1, 4))
    graph.input_spec.tensor_data[0][1].max_shape[0] = 8  # as a batch search would widen it
    reference = EagerReference(model, validation_points(graph, samples), ForwardSignature(model.forward), CPU)
    assert [note.split(":")[0] for note in reference.skipped] == [
        "batch 7, sample 0, first call",
        "batch 8, sample 1, first call",
    ]
    assert reference.validate(model, Tolerances()).passed
