"""Everything a backend plugin needs from aitune-core, in one stable place.

Plugins import from here (and test with :mod:`aitune_core.testing`) instead of from
the core's internal modules, which may move between releases; what is listed here
keeps its name and meaning within a plugin API version (``PLUGIN_API_VERSION``).

This is the backend author's kernel: the backend contract, the specs of graphs and
their tensors, validation helpers, safe options and the hook markers. Importing it
loads those and nothing above them (no strategies, executors, checkpoints or
tuning); ``tests/architecture`` measures what it loads and the ``lint`` session's
import contracts keep it so. What only executor plugins need (payloads, answers,
process-tree helpers) is in :mod:`aitune_core.plugin_api.executors`.
"""

from __future__ import annotations

from aitune_core.backends.autocast import autocast, cast_outputs
from aitune_core.backends.base import Availability, Backend, BackendConfig, BuildContext, RefitError
from aitune_core.backends.build_folders import BUILDS, build_identity, tensor_bytes, weights_fingerprint
from aitune_core.backends.eager import floating_dtype
from aitune_core.backends.safe_options import (
    AllowList,
    BoolRule,
    ChoiceRule,
    IntRule,
    OptionRule,
    UnsafeOptionError,
    allowed_options,
)
from aitune_core.backends.state import BackendState
from aitune_core.backends.tolerances import DEFAULT_TOLERANCES, Tolerance, Tolerances
from aitune_core.config import config
from aitune_core.errors import CheckpointError
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

__all__ = [
    "BASELINE_PRIORITY",
    "BATCH_DIM",
    "BUILDS",
    "DEFAULT_PRIORITY",
    "DEFAULT_TOLERANCES",
    "PLUGIN_API_VERSION",
    "AllowList",
    "Availability",
    "Backend",
    "BackendConfig",
    "BackendState",
    "BoolRule",
    "BuildContext",
    "Candidate",
    "CheckpointError",
    "ChoiceRule",
    "ContainerRegistrar",
    "DataDependence",
    "ForwardSignature",
    "GraphSpec",
    "IntRule",
    "Locator",
    "OptionRule",
    "RefitError",
    "Sample",
    "TensorSpec",
    "Tolerance",
    "Tolerances",
    "UnsafeOptionError",
    "allowed_options",
    "as_call",
    "autocast",
    "build_identity",
    "cast_outputs",
    "compare_outputs",
    "config",
    "data_dependent_reason",
    "dtype_from_str",
    "export_dims",
    "find_data_dependence",
    "floating_dtype",
    "get_logger",
    "hookimpl",
    "map_leaves",
    "register_container",
    "resize",
    "stable_hash",
    "tensor_bytes",
    "to_device",
    "varying_batch_range",
    "walk_inputs",
    "walk_outputs",
    "weights_fingerprint",
]
