"""A plugin that imports fine but fails while registering its backends."""

from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1


@hookimpl
def aitune_register_backends() -> list[type]:
    raise RuntimeError("license server unreachable")
