"""The entry point aitune loads (group ``aitune.plugins``): it makes ``aitune plugins`` list the JIT.

The JIT registers no backend, executor or container: it is a way of running ``tune``
(in the background, on the calls a process already makes), above the engine. It is a
distribution of its own because it installs a start-up hook (``aitune_jit.pth``) and
patches torch's FX tracing per thread, which ties it to the torch versions it was
checked against.
"""

from __future__ import annotations

from aitune_core.plugin_api import PLUGIN_API_VERSION

AITUNE_PLUGIN_API = PLUGIN_API_VERSION
