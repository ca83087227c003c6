"""A plugin implementing a hook that does not exist (a typo, or a newer aitune's hook)."""

from aitune_core import hookimpl
from aitune_core.backends import Backend, TorchEagerBackend

AITUNE_PLUGIN_API = 1


class TypoBackend(TorchEagerBackend):
    name = "fake_typo"


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [TypoBackend]


@hookimpl
def aitune_register_backend() -> list[type[Backend]]:
    return [TypoBackend]
