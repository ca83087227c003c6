"""Everything a backend or executor plugin needs from aitune-core, in one stable place.

Plugins import from here (and test with :mod:`aitune_core.testing`) instead of from
the core's internal modules, which may move between releases; what is listed here
keeps its name and meaning within a plugin API version (``PLUGIN_API_VERSION``).
Names are imported on first access, so importing this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "Availability": "aitune_core.backends.base",
    "Backend": "aitune_core.backends.base",
    "BackendConfig": "aitune_core.backends.base",
    "BuildContext": "aitune_core.backends.base",
    "BackendState": "aitune_core.backends.state",
    "hookimpl": "aitune_core.plugins.api",
    "PLUGIN_API_VERSION": "aitune_core.plugins.api",
    "DEFAULT_PRIORITY": "aitune_core.plugins.api",
    "BASELINE_PRIORITY": "aitune_core.plugins.api",
    "Candidate": "aitune_core.plugins.records",
    "ContainerRegistrar": "aitune_core.plugins.records",
    "ForwardSignature": "aitune_core.graphs.forward_signature",
    "GraphSpec": "aitune_core.graphs.graph_spec",
    "Sample": "aitune_core.graphs.graph_spec",
    "BATCH_DIM": "aitune_core.graphs.dims",
    "export_dims": "aitune_core.graphs.dims",
    "varying_batch_range": "aitune_core.graphs.dims",
    "TensorSpec": "aitune_core.metadata.tensor_spec",
    "Locator": "aitune_core.metadata.locator",
    "map_leaves": "aitune_core.metadata.locator",
    "register_container": "aitune_core.metadata.containers",
    "walk_inputs": "aitune_core.metadata.locator",
    "walk_outputs": "aitune_core.metadata.locator",
    "resize": "aitune_core.metadata.resize",
    "to_device": "aitune_core.validation.inputs",
    "as_call": "aitune_core.validation.inputs",
    "Tolerance": "aitune_core.backends.tolerances",
    "Tolerances": "aitune_core.backends.tolerances",
    "DEFAULT_TOLERANCES": "aitune_core.backends.tolerances",
    "compare_outputs": "aitune_core.validation.compare",
    "AllowList": "aitune_core.backends.safe_options",
    "BoolRule": "aitune_core.backends.safe_options",
    "ChoiceRule": "aitune_core.backends.safe_options",
    "IntRule": "aitune_core.backends.safe_options",
    "OptionRule": "aitune_core.backends.safe_options",
    "allowed_options": "aitune_core.backends.safe_options",
    "autocast": "aitune_core.backends.autocast",
    "cast_outputs": "aitune_core.backends.autocast",
    "floating_dtype": "aitune_core.backends.eager",
    "build_identity": "aitune_core.backends.build_folders",
    "weights_fingerprint": "aitune_core.backends.build_folders",
    "tensor_bytes": "aitune_core.backends.build_folders",
    "BUILDS": "aitune_core.backends.build_folders",
    "stable_hash": "aitune_core.serialization",
    "dtype_from_str": "aitune_core.serialization",
    "CheckpointError": "aitune_core.errors",
    "config": "aitune_core.config",
    "get_logger": "aitune_core.log",
    "Executor": "aitune_core.executors.base",
    "ExecutorError": "aitune_core.executors.base",
    "DEFAULT_TIMEOUT_S": "aitune_core.executors.base",
    "RemoteExecutor": "aitune_core.executors.isolated.remote",
    "Answer": "aitune_core.executors.isolated.answer",
    "GraphPayload": "aitune_core.executors.isolated.payload",
    "run_payload": "aitune_core.executors.isolated.worker",
    "worker_id": "aitune_core.executors.isolated.worker",
    "EXIT_OUT_OF_MEMORY": "aitune_core.executors.isolated.worker",
    "default_limit_mb": "aitune_core.executors.isolated.memory",
    "held_bytes": "aitune_core.executors.isolated.memory",
    "over_limit": "aitune_core.executors.isolated.memory",
    "with_descendants": "aitune_core.executors.isolated.memory",
    "CandidateResult": "aitune_core.evaluate.candidate",
    "GraphSession": "aitune_core.evaluate.candidate",
    "DataDependence": "aitune_core.validation.data_dependent",
    "data_dependent_reason": "aitune_core.validation.data_dependent",
    "find_data_dependence": "aitune_core.validation.data_dependent",
}

__all__ = [
    "BASELINE_PRIORITY",
    "BATCH_DIM",
    "BUILDS",
    "DEFAULT_PRIORITY",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TOLERANCES",
    "EXIT_OUT_OF_MEMORY",
    "PLUGIN_API_VERSION",
    "AllowList",
    "Answer",
    "Availability",
    "Backend",
    "BackendConfig",
    "BackendState",
    "BoolRule",
    "BuildContext",
    "Candidate",
    "CandidateResult",
    "CheckpointError",
    "ChoiceRule",
    "ContainerRegistrar",
    "DataDependence",
    "Executor",
    "ExecutorError",
    "ForwardSignature",
    "GraphPayload",
    "GraphSession",
    "GraphSpec",
    "IntRule",
    "Locator",
    "OptionRule",
    "RemoteExecutor",
    "Sample",
    "TensorSpec",
    "Tolerance",
    "Tolerances",
    "allowed_options",
    "as_call",
    "autocast",
    "build_identity",
    "cast_outputs",
    "compare_outputs",
    "config",
    "data_dependent_reason",
    "default_limit_mb",
    "dtype_from_str",
    "export_dims",
    "find_data_dependence",
    "floating_dtype",
    "get_logger",
    "held_bytes",
    "hookimpl",
    "map_leaves",
    "over_limit",
    "register_container",
    "resize",
    "run_payload",
    "stable_hash",
    "tensor_bytes",
    "to_device",
    "varying_batch_range",
    "walk_inputs",
    "walk_outputs",
    "weights_fingerprint",
    "with_descendants",
    "worker_id",
]


__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"aitune_core.plugin_api has no {name!r}; it offers {', '.join(__all__)}"
)


if TYPE_CHECKING:
    from aitune_core.backends.autocast import autocast, cast_outputs
    from aitune_core.backends.base import Availability, Backend, BackendConfig, BuildContext
    from aitune_core.backends.build_folders import BUILDS, build_identity, tensor_bytes, weights_fingerprint
    from aitune_core.backends.eager import floating_dtype
    from aitune_core.backends.safe_options import AllowList, BoolRule, ChoiceRule, IntRule, OptionRule, allowed_options
    from aitune_core.backends.state import BackendState
    from aitune_core.backends.tolerances import DEFAULT_TOLERANCES, Tolerance, Tolerances
    from aitune_core.config import config
    from aitune_core.errors import CheckpointError
    from aitune_core.evaluate.result import CandidateResult
    from aitune_core.evaluate.session import GraphSession
    from aitune_core.executors.base import DEFAULT_TIMEOUT_S, Executor, ExecutorError
    from aitune_core.executors.isolated.answer import Answer
    from aitune_core.executors.isolated.memory import default_limit_mb, held_bytes, over_limit, with_descendants
    from aitune_core.executors.isolated.payload import GraphPayload
    from aitune_core.executors.isolated.remote import RemoteExecutor
    from aitune_core.executors.isolated.worker import EXIT_OUT_OF_MEMORY, run_payload, worker_id
    from aitune_core.graphs.dims import BATCH_DIM, export_dims, varying_batch_range
    from aitune_core.graphs.forward_signature import ForwardSignature
    from aitune_core.graphs.graph_spec import GraphSpec, Sample
    from aitune_core.log import get_logger
    from aitune_core.metadata.containers import register_container
    from aitune_core.metadata.locator import Locator, map_leaves, walk_inputs, walk_outputs
    from aitune_core.metadata.resize import resize
    from aitune_core.metadata.tensor_spec import TensorSpec
    from aitune_core.plugins.api import BASELINE_PRIORITY, DEFAULT_PRIORITY, PLUGIN_API_VERSION, hookimpl
    from aitune_core.plugins.records import Candidate, ContainerRegistrar
    from aitune_core.serialization import dtype_from_str, stable_hash
    from aitune_core.validation.compare import compare_outputs
    from aitune_core.validation.data_dependent import DataDependence, data_dependent_reason, find_data_dependence
    from aitune_core.validation.inputs import as_call, to_device
