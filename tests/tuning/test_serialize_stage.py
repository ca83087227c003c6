"""A winner that could not be saved fails as a candidate, when it passes, naming the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from tuning_helpers import FAST_PROFILE, SlowableMLP

import aitune_core as ait
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.checkpoint.save import save
from aitune_core.errors import CheckpointError
from aitune_core.serialization import UnstableDataError, stable_hash
from aitune_core.strategies import FirstWinsStrategy
from aitune_core.tuning import tune


@attrs.frozen
class EmptyConfig(BackendConfig):
    pass


class _Runs(Backend):
    """Runs the module as it is; subclasses break one part of ``to_dict()``."""

    config_class = EmptyConfig

    def _build(self, context: BuildContext) -> None:
        self.runs = context.module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.runs(*args, **kwargs)


class TensorInExtraState(_Runs):
    name = "test_tensor_in_extra"

    def _extra_state(self) -> dict[str, Any]:
        return {"scale": torch.ones(2)}


class MissingArtifact(_Runs):
    name = "test_missing_artifact"

    def _artifacts(self) -> dict[str, Path]:
        assert self.context is not None
        return {"engine": self.context.cache_dir / "never-written.plan"}


@attrs.frozen
class TupleConfig(BackendConfig):
    shape: Any = (2, 3)


class TupleThroughAny(_Runs):
    """A field typed ``Any`` holding a tuple: JSON gives back a list, so the config changes on load."""

    name = "test_tuple_through_any"
    config_class = TupleConfig


class LateTensor(_Runs):
    """Passes as it is, then puts a tensor in its extra state: only ``save`` can see it."""

    name = "test_late_tensor"
    late = False

    def _extra_state(self) -> dict[str, Any]:
        return {"scale": torch.ones(2)} if self.late else {}


def _tune(backend: Backend, name: str) -> tuple[ait.Module, Any]:
    module = ait.Module(SlowableMLP().eval(), name)
    strategy = FirstWinsStrategy([backend], profile=FAST_PROFILE).enable_performance_validation(False)
    report = tune(module, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    return module, report


@pytest.mark.parametrize(
    ("backend", "named"),
    [
        (TensorInExtraState(), ["_extra_state()['scale'] is a torch.Tensor", "not JSON data", "_artifacts()"]),
        (MissingArtifact(), ["_artifacts()['engine']", "not a file"]),
        (TupleThroughAny(), ["config field(s) shape", "(2, 3) comes back as [2, 3]", "aitune_extend_converter"]),
    ],
    ids=["tensor-in-extra-state", "missing-artifact", "config-changes-through-json"],
)
def test_a_backend_that_could_not_be_saved_fails_at_serialize(backend: Backend, named: list[str], unique_name) -> None:  # type: ignore[no-untyped-def]
    module, report = _tune(backend, unique_name())
    failed, fallback = report.graphs[0].candidates
    assert failed.status == "failed" and failed.stage == "serialize", failed
    for words in named:
        assert words in failed.reason
    assert fallback.status == "fallback"
    assert isinstance(module.backends["0"], TorchEagerBackend)


def test_save_names_module_graph_and_backend_for_what_it_cannot_write(tmp_path: Path, unique_name) -> None:  # type: ignore[no-untyped-def]
    name = unique_name("late")
    module, report = _tune(LateTensor(), name)
    assert report.graphs[0].candidates[0].status == "selected"
    backend = module.backends["0"]
    assert isinstance(backend, LateTensor)
    backend.late = True
    with pytest.raises(CheckpointError) as refused:
        save(module, tmp_path / "ckpt")
    message = str(refused.value)
    for words in (f"module `{name}`", "graph `0`", "backend `LateTensor()`", "_extra_state()['scale']"):
        assert words in message


class Addressed:
    """Its str shows its address: a different text in every process."""


def test_stable_hash_refuses_what_is_not_json_and_names_it() -> None:
    with pytest.raises(UnstableDataError, match=r"data\['level'\]\[0\] is a .*Addressed.*aitune_extend_converter"):
        stable_hash({"level": [Addressed()]})
    assert stable_hash({"b": [1, 2.5, None], "a": "x"}) == stable_hash({"a": "x", "b": [1, 2.5, None]})


@attrs.frozen
class AddressConfig(BackendConfig):
    thing: Any = attrs.field(factory=Addressed)


class AddressKeyed(_Runs):
    name = "test_address_keyed"
    config_class = AddressConfig


def test_a_key_from_an_unknown_config_type_is_refused_naming_the_field() -> None:
    with pytest.raises(UnstableDataError, match=r"data\['thing'\] is a .*Addressed"):
        AddressKeyed().key()
