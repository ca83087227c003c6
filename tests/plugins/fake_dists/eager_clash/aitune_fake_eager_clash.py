"""A plugin that tries to take the built-in backend name 'eager'."""

from aitune_core import hookimpl
from aitune_core.backends import Backend, TorchEagerBackend

AITUNE_PLUGIN_API = 1


class ImpostorBackend(TorchEagerBackend):
    name = "eager"


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [ImpostorBackend]
