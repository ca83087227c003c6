"""A Ray Serve application that serves a tuned checkpoint (``aitune serve CKPT --factory pkg.mod:build``).

:mod:`.settings` sizes the replicas from what tuning measured, :mod:`.factory` builds the
user's model, :mod:`.wire` is the HTTP format, :mod:`.app` the replicas, :mod:`.launch`
a Ray of its own on loopback with the application on it, and :mod:`.command` the
command. Importing this package imports neither Ray nor Ray Serve; Ray Serve's HTTP
libraries come with the ``serve`` extra (``pip install 'aitune-ray[serve]'``).
"""

from aitune_ray.serving.launch import LocalServer, ServeError, serve_applications, serve_locally
from aitune_ray.serving.settings import ReplicaSetup, ServeSettings, replica_setup

__all__ = [
    "LocalServer",
    "ReplicaSetup",
    "ServeError",
    "ServeSettings",
    "replica_setup",
    "serve_applications",
    "serve_locally",
]
