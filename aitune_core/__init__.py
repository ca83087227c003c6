"""aitune: tune PyTorch inference on real data, and route calls to the fastest correct backend.

Wrap what should be tuned with :class:`Module`, call :func:`tune` with a few batches
of real data, and later calls go to the backend that won for their graph.

Names are imported on first access, so ``import aitune_core`` stays cheap next to
``import torch``; ``from aitune_core import tune`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aitune_core._version import __version__

# Imported eagerly: loading the submodule ``aitune_core.config`` (which any internal
# import does) sets the package attribute ``config`` to that submodule, which would
# then shadow the lazy ``__getattr__`` and make ``aitune_core.config.strict_mode = ...``
# a silent no-op. Binding the instance here, after the submodule is loaded, keeps it.
from aitune_core.config import config
from aitune_core.lazy_exports import lazy_exports as _lazy_exports


def _load_plugins() -> None:
    """Load and install the plugins; the layers below reach them only through ``aitune_core.extensions``."""
    from aitune_core.plugins.manager import current_registry  # import aitune_core loads no plugin code

    current_registry()


def _refit_in_background(module: Any) -> None:
    """Start a background refit of a wrapped module (``config.on_weight_change = "refit"``), loading refits first."""
    importlib.import_module("aitune_core.refitting.background").request(module)


_extensions = importlib.import_module("aitune_core.extensions")
_extensions.set_loader(_load_plugins)
_extensions.set_refitter(_refit_in_background)

_EXPORTS: dict[str, str] = {
    "AccuracyBudget": "aitune_core.accuracy",
    "AccuracyError": "aitune_core.accuracy",
    "metrics": "aitune_core.accuracy",
    "Availability": "aitune_core.backends",
    "Backend": "aitune_core.backends",
    "BackendConfig": "aitune_core.backends",
    "BackendState": "aitune_core.backends",
    "BuildContext": "aitune_core.backends",
    "IllegalStateTransitionError": "aitune_core.backends",
    "TorchEagerBackend": "aitune_core.backends",
    "TorchEagerBackendConfig": "aitune_core.backends",
    "CheckpointError": "aitune_core.errors",
    "DeployError": "aitune_core.deploy.target",
    "ExportSummary": "aitune_core.deploy.export",
    "export": "aitune_core.deploy.export",
    "ServedGraph": "aitune_core.deploy.serving",
    "ServingPlan": "aitune_core.deploy.serving",
    "serving_plan": "aitune_core.deploy.serving",
    "load": "aitune_core.checkpoint.load",
    "save": "aitune_core.checkpoint.save",
    "config": "aitune_core.config",
    "BATCH_SIZE_KEY": "aitune_core.context",
    "global_context": "aitune_core.context",
    "BatchDim": "aitune_core.graphs",
    "DeclarationError": "aitune_core.graphs",
    "DynamicDim": "aitune_core.graphs",
    "ForwardSignature": "aitune_core.graphs",
    "GraphSpec": "aitune_core.graphs",
    "Sample": "aitune_core.graphs",
    "InfoLevel": "aitune_core.metadata",
    "Locator": "aitune_core.metadata",
    "SampleMetadata": "aitune_core.metadata",
    "TensorSpec": "aitune_core.metadata",
    "register_container": "aitune_core.metadata",
    "Module": "aitune_core.module",
    "ModuleState": "aitune_core.module",
    "UnsupportedCallError": "aitune_core.module",
    "StaleWeightsError": "aitune_core.module.new_weights",
    "RefitReport": "aitune_core.refitting",
    "refit": "aitune_core.refitting",
    "wait_for_refit": "aitune_core.refitting",
    "RefitError": "aitune_core.backends.base",
    "InspectReport": "aitune_core.inspection",
    "inspect": "aitune_core.inspection",
    "hookimpl": "aitune_core.plugins",
    "ProfileConfig": "aitune_core.profiling",
    "TuneReport": "aitune_core.reporting",
    "FirstWinsStrategy": "aitune_core.strategies",
    "LatencyBudgetStrategy": "aitune_core.strategies",
    "MaxThroughputStrategy": "aitune_core.strategies",
    "MinLatencyStrategy": "aitune_core.strategies",
    "OneBackendStrategy": "aitune_core.strategies",
    "TuneStrategy": "aitune_core.strategies",
    "TuningError": "aitune_core.tuning",
    "tune": "aitune_core.tuning",
    "Tolerance": "aitune_core.validation",
    "Tolerances": "aitune_core.validation",
    "WrapError": "aitune_core.wrapping",
    "unwrap": "aitune_core.wrapping",
    "wrap": "aitune_core.wrapping",
}

# Subpackages that are also public names: ``aitune_core.plugins()`` lists plugins.
_SUBPACKAGES = frozenset({"plugins"})
# Public names that other distributions provide: ``ait.jit`` is the aitune-jit distribution.
_DISTRIBUTED = {"jit": ("aitune_jit", "aitune-jit")}


class MissingDistributionError(AttributeError):
    """A public name whose distribution is not installed: the message names what to install.

    An AttributeError, as for any missing attribute, so that ``hasattr(ait, "jit")`` says
    False; ``from aitune_core import jit`` turns it into an ImportError that shows it.
    """


__all__ = [
    "BATCH_SIZE_KEY",
    "AccuracyBudget",
    "AccuracyError",
    "Availability",
    "Backend",
    "BackendConfig",
    "BackendState",
    "BatchDim",
    "BuildContext",
    "CheckpointError",
    "DeclarationError",
    "DeployError",
    "DynamicDim",
    "ExportSummary",
    "FirstWinsStrategy",
    "ForwardSignature",
    "GraphSpec",
    "IllegalStateTransitionError",
    "InfoLevel",
    "InspectReport",
    "LatencyBudgetStrategy",
    "Locator",
    "MaxThroughputStrategy",
    "MinLatencyStrategy",
    "MissingDistributionError",
    "Module",
    "ModuleState",
    "OneBackendStrategy",
    "ProfileConfig",
    "RefitError",
    "RefitReport",
    "Sample",
    "SampleMetadata",
    "ServedGraph",
    "ServingPlan",
    "StaleWeightsError",
    "TensorSpec",
    "Tolerance",
    "Tolerances",
    "TorchEagerBackend",
    "TorchEagerBackendConfig",
    "TuneReport",
    "TuneStrategy",
    "TuningError",
    "UnsupportedCallError",
    "WrapError",
    "__version__",
    "config",
    "export",
    "global_context",
    "hookimpl",
    "inspect",
    "load",
    "metrics",
    "plugins",
    "refit",
    "register_container",
    "save",
    "serving_plan",
    "tune",
    "unwrap",
    "wait_for_refit",
    "wrap",
]


_export, __dir__ = _lazy_exports(globals(), _EXPORTS, lambda name: f"module 'aitune_core' has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"aitune_core.{name}")
    if name in _DISTRIBUTED:
        package, distribution = _DISTRIBUTED[name]
        try:
            return importlib.import_module(package)
        except ModuleNotFoundError as error:
            if error.name != package:
                raise
            raise MissingDistributionError(
                f"ait.{name} is provided by the {distribution} distribution, which is not installed: "
                f"pip install {distribution} (from a checkout: pip install ./plugins/{package})"
            ) from None
    return _export(name)


if TYPE_CHECKING:
    from aitune_core.accuracy import AccuracyBudget, AccuracyError, metrics
    from aitune_core.backends import (
        Availability,
        Backend,
        BackendConfig,
        BackendState,
        BuildContext,
        IllegalStateTransitionError,
        TorchEagerBackend,
        TorchEagerBackendConfig,
    )
    from aitune_core.backends.base import RefitError
    from aitune_core.checkpoint.load import load
    from aitune_core.checkpoint.save import save
    from aitune_core.config import config
    from aitune_core.context import BATCH_SIZE_KEY, global_context
    from aitune_core.deploy.export import ExportSummary, export
    from aitune_core.deploy.serving import ServedGraph, ServingPlan, serving_plan
    from aitune_core.deploy.target import DeployError
    from aitune_core.errors import CheckpointError
    from aitune_core.graphs import BatchDim, DeclarationError, DynamicDim, ForwardSignature, GraphSpec, Sample
    from aitune_core.inspection import InspectReport, inspect
    from aitune_core.metadata import InfoLevel, Locator, SampleMetadata, TensorSpec, register_container
    from aitune_core.module import Module, ModuleState, UnsupportedCallError
    from aitune_core.module.new_weights import StaleWeightsError
    from aitune_core.plugins import hookimpl
    from aitune_core.profiling import ProfileConfig
    from aitune_core.refitting import RefitReport, refit, wait_for_refit
    from aitune_core.reporting import TuneReport
    from aitune_core.strategies import (
        FirstWinsStrategy,
        LatencyBudgetStrategy,
        MaxThroughputStrategy,
        MinLatencyStrategy,
        OneBackendStrategy,
        TuneStrategy,
    )
    from aitune_core.tuning import TuningError, tune
    from aitune_core.validation import Tolerance, Tolerances
    from aitune_core.wrapping import WrapError, unwrap, wrap
