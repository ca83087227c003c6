"""A released AOT backend gives back its loaded package at once: weights, library and unpacked folder.

One real compile; the failed-build case reuses its package instead of compiling again.
"""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_inductor import aot
from aitune_inductor.aot import PackageRunner, TorchInductorAotBackend

pytestmark = pytest.mark.slow


def test_release_frees_the_loaded_package(mlp_context: BuildContext, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = TorchInductorAotBackend().build(mlp_context)
    runner = backend._model
    assert isinstance(runner, PackageRunner)
    folder = runner._keep_alive.folder  # type: ignore[attr-defined]
    collected = weakref.ref(runner)
    del runner
    backend.deactivate()
    assert collected() is None and not folder.exists()

    # Even while something else still holds the runner, what it loaded goes with the deactivation.
    backend.activate()
    held = backend._model
    assert isinstance(held, PackageRunner)
    folder = held._keep_alive.folder  # type: ignore[attr-defined]
    backend.deactivate()
    assert held._loader is None and not folder.exists()
    with pytest.raises(RuntimeError, match="activate its backend again"):
        held(torch.randn(2, 8))

    # A build that fails after loading its package (here: in its warm-up calls) frees it too.
    package = backend.package_path
    assert package is not None
    loaded: list[tuple[PackageRunner, Path]] = []
    load = aot.load_package

    def copy_package(program: Any, package_path: str, **_: Any) -> str:
        shutil.copyfile(package, package_path)
        return package_path

    def load_and_remember(*args: Any) -> PackageRunner:
        runner = load(*args)
        loaded.append((runner, runner._keep_alive.folder))  # type: ignore[attr-defined]
        return runner

    def fail(*_: Any, **__: Any) -> Any:
        raise RuntimeError("warm-up failed")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", copy_package)
    monkeypatch.setattr(aot, "load_package", load_and_remember)
    monkeypatch.setattr(TorchInductorAotBackend, "_infer", fail)
    failed = TorchInductorAotBackend()
    with pytest.raises(RuntimeError, match="warm-up failed"):
        failed.build(_other_folder(mlp_context))
    ((runner, folder),) = loaded
    assert failed._model is None and runner._loader is None and not folder.exists()


def _other_folder(context: BuildContext) -> BuildContext:
    import attrs

    return attrs.evolve(context, cache_dir=Path(context.cache_dir) / "failed")
