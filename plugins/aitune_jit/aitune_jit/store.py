"""Where the JIT keeps what it tuned: a checkpoint per model under ``config.cache_dir / "jit"``.

A result is keyed by the weights fingerprint (a sha256 of every parameter and buffer,
:func:`~aitune_core.backends.build_folders.weights_fingerprint`), plus the model's
class, the modules chosen and the torch and aitune versions: a restarted process with
the same weights finds it, a fine-tuned model or an upgraded torch does not. Hashing
costs one read of the weights at the model's first call (about 1 ms for the demo CNN,
90 ms per 100 MB).

Saving and loading are the checkpoint's own (:func:`aitune_core.save`,
:func:`aitune_core.load`): written atomically, checked before anything is applied, all
or nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from aitune_core._version import __version__
from aitune_core.backends.build_folders import weights_fingerprint
from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.manifest import MANIFEST_NAME
from aitune_core.checkpoint.save import save
from aitune_core.config import config
from aitune_core.serialization import stable_hash

JIT_FOLDER = "jit"


def result_path(model: nn.Module, paths: list[str]) -> Path:
    """The checkpoint folder for ``model``'s weights with ``paths`` tuned."""
    fingerprint = weights_fingerprint(model)
    cls = type(model)
    identity = stable_hash(
        {
            "model": f"{cls.__module__}.{cls.__qualname__}",
            "modules": paths,
            "torch": torch.__version__,
            "aitune": __version__,
        },
        length=12,
    )
    return config.cache_dir / JIT_FOLDER / f"{fingerprint[:32]}-{identity}"


def stored(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file()


def load_result(target: nn.Module, path: Path, trust_native_code: bool) -> None:
    """Put the stored routes into ``target`` (the wrapped model, or the model holding the wrappers)."""
    load(target, path, trust_native_code=trust_native_code)


def store_result(target: nn.Module, path: Path) -> None:
    """Write every tuned wrapper in ``target``; the previous result at ``path`` is replaced atomically."""
    save(target, path)
