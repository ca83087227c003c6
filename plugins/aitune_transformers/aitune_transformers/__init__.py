"""aitune-transformers: Hugging Face language models that tune, prefill and decode alike.

Installed next to aitune-core it registers transformers' KV caches as containers and
keys each call by its phase (prefill or decode). Importing it does not import
transformers.
"""

from aitune_transformers._version import __version__

__all__ = ["__version__"]
