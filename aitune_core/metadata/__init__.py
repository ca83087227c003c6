"""Metadata capture: locators, tensor specs and sample metadata."""

from aitune_core.metadata.containers import ContainerType, register_container
from aitune_core.metadata.locator import Locator
from aitune_core.metadata.sample_metadata import InfoLevel, SampleMetadata
from aitune_core.metadata.tensor_spec import TensorSpec

__all__ = ["ContainerType", "InfoLevel", "Locator", "SampleMetadata", "TensorSpec", "register_container"]
