"""A backend from stored data: the installed class of the distribution that wrote it, its config checked.

Loading a checkpoint restores each stored backend this way, and so does a backend
made of other backends (a partition restores each of its children), so every stored
backend, at any depth, comes from a class an installed plugin registers, from the
distribution that wrote it, through its own ``from_dict``.
"""

from __future__ import annotations

from typing import Any

from aitune_core._version import __version__
from aitune_core.backends.base import Backend
from aitune_core.extensions import UnknownBackendError, slots
from aitune_core.log import get_logger


class StoredStateError(ValueError):
    """Stored state that cannot be restored or does not fit; the message says what to install or what is wrong."""


def backend_origin(name: str) -> tuple[str, str]:
    """The distribution (and its version) whose plugin registered backend ``name``."""
    return slots().backend_origin(name) or ("aitune-core", __version__)


def installed_class(name: str, distribution: str, version: str) -> type[Backend]:
    """The installed class of backend ``name``, when ``distribution`` (which wrote it) is the one that registers it."""
    try:
        cls: type[Backend] = slots().backend_class(name)
    except UnknownBackendError:
        raise StoredStateError(
            f"backend `{name}` is not installed; install {distribution}>={version} to load this checkpoint"
        ) from None
    installed, installed_version = backend_origin(name)
    if installed != distribution:
        raise StoredStateError(
            f"backend `{name}` was written by {distribution} {version}, but here `{name}` is registered by "
            f"{installed} {installed_version}; install {distribution}>={version} (and remove {installed}) to load "
            "this checkpoint"
        )
    if _major(installed_version) != _major(version):
        get_logger().warning(
            "plugin major version differs from the checkpoint's",
            backend=name,
            distribution=installed,
            installed=installed_version,
            checkpoint=version,
        )
    return cls


def restore_backend(name: str, distribution: str, version: str, data: dict[str, Any]) -> Backend:
    """Backend ``name`` from its ``to_dict()`` data, by its installed class: config checked, nothing loaded yet."""
    return installed_class(name, distribution, version).from_dict(data)


def _major(version: str) -> str:
    return version.split(".", 1)[0]
