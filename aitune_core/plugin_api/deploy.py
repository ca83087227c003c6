"""What deploy targets and backends with standalone artifacts need beyond :mod:`aitune_core.plugin_api`.

A backend whose winner stands alone (an ONNX model, an OpenVINO IR, an AOT Inductor
package, a TensorRT plan) describes it with these classes from
``Backend.deployable(graph)``; one without answers ``NoDeployable(reason)``. A plugin
that writes checkpoints for a server subclasses :class:`DeployTarget` and registers it
with the ``aitune_register_targets`` hook. :func:`flat_io` names an exported graph's
flat tensors as its export did; :func:`device_of` says which device a graph was tuned
on. They live apart from the backend surface, so that a backend author who deploys
nothing loads none of them; like it, they keep their meaning within a plugin API version.
"""

from __future__ import annotations

from aitune_core.backends.base import NoDeployable
from aitune_core.backends.deployable import (
    FORMATS,
    Deployable,
    OptimizationProfile,
    ProfileShapes,
    RuntimeOptions,
    TensorIO,
    device_of,
)
from aitune_core.deploy.target import DeployError, DeployModel, DeployTarget, NoOptions
from aitune_core.exported.deploy_io import flat_io

__all__ = [
    "FORMATS",
    "DeployError",
    "DeployModel",
    "DeployTarget",
    "Deployable",
    "NoDeployable",
    "NoOptions",
    "OptimizationProfile",
    "ProfileShapes",
    "RuntimeOptions",
    "TensorIO",
    "device_of",
    "flat_io",
]
