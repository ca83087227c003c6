from aitune_core.backends import Backend, BackendConfig, BackendState, TorchEagerBackend
from aitune_core.config import config
from aitune_core.graphs import GraphSpec
from aitune_core.metadata import InfoLevel, Locator, SampleMetadata, TensorSpec
from aitune_core.module import Module
