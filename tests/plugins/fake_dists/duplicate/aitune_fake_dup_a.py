"""One of two plugins that both register the backend name 'fake_dup'."""

from aitune_core import hookimpl
from aitune_core.backends import Backend, TorchEagerBackend

AITUNE_PLUGIN_API = 1


class DupBackenda(TorchEagerBackend):
    name = "fake_dup"


class OnlyaBackend(TorchEagerBackend):
    name = "fake_only_a"


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [DupBackenda, OnlyaBackend]
