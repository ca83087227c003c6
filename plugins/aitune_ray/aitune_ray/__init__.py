"""aitune-ray: run aitune's candidates on a Ray cluster.

``tune(..., executor="ray")`` (or ``aitune_core.config.executor = "ray"``) builds,
validates and profiles each candidate as a Ray task, on the cluster at ``RAY_ADDRESS``
or on a Ray started on this machine. Importing this package does not import Ray.
"""

from aitune_ray._version import __version__
from aitune_ray.executor import RayExecutor

__all__ = ["RayExecutor", "__version__"]
