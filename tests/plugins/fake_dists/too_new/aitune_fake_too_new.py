"""A plugin written against a plugin API newer than this aitune-core has."""

from aitune_core import hookimpl
from aitune_core.backends import Backend, TorchEagerBackend

AITUNE_PLUGIN_API = 99


class FutureBackend(TorchEagerBackend):
    name = "fake_future"


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [FutureBackend]
