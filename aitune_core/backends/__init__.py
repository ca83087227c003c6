"""Backends: the lifecycle base class, its state machine, and the eager baseline."""

from aitune_core.backends.base import Availability, Backend, BackendConfig, BuildContext
from aitune_core.backends.eager import TorchEagerBackend, TorchEagerBackendConfig
from aitune_core.backends.state import BackendState, IllegalStateTransitionError

__all__ = [
    "Availability",
    "Backend",
    "BackendConfig",
    "BackendState",
    "BuildContext",
    "IllegalStateTransitionError",
    "TorchEagerBackend",
    "TorchEagerBackendConfig",
]
