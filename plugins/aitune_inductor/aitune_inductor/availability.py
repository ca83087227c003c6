"""Whether Inductor can compile here: a C++ compiler on the CPU, triton on CUDA.

Inductor only finds out that its compiler is missing in the middle of a build, after
tracing has already cost seconds, and then fails with a long traceback. Checking up
front lets strategies skip the backend with one readable reason instead.

The CPU check follows Inductor's own search (``torch._inductor.cpp_builder``): the
compilers named in ``torch._inductor.config.cpp.cxx``, which default to ``$CXX`` or
``g++`` (``clang++`` on macOS), each tried with ``--version``. Importing Inductor's
config costs over a second, so when nobody has imported it yet the same defaults are
searched without it; once it is imported, its current settings are used.
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys

import torch

from aitune_core.plugin_api import Availability


def _default_cxx() -> tuple[str | None, ...]:
    return (None, os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++"))


def _configured_cxx() -> tuple[str | None, ...]:
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return _default_cxx()
    cxx = config.cpp.cxx
    return tuple(cxx) if isinstance(cxx, (list, tuple)) else (cxx,)


@functools.lru_cache(maxsize=8)
def _find_compiler(search: tuple[str | None, ...]) -> str | None:
    for cxx in search:
        if cxx is None:
            # Inductor may download g++ through conda here; that is its business, not a check's.
            continue
        try:
            subprocess.run([cxx, "--version"], check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        return cxx
    return None


def cpp_compiler_availability() -> Availability:
    """A C++ compiler for Inductor's CPU kernels and for AOT Inductor's wrapper."""
    search = _configured_cxx()
    if _find_compiler(search) is not None:
        return Availability.yes()
    tried = ", ".join(c for c in search if c is not None) or "none"
    return Availability.no(f"no C++ compiler found for Inductor (tried: {tried}); install g++ or clang++, or set CXX")


@functools.lru_cache(maxsize=1)
def _triton_error() -> str | None:
    try:
        importlib.import_module("triton")
    except Exception as error:  # any failure to import means triton cannot be used
        return f"{type(error).__name__}: {error}".strip()
    return None


def triton_availability() -> Availability:
    """Inductor generates triton kernels on CUDA; without triton it cannot compile there."""
    error = _triton_error()
    if error is None:
        return Availability.yes()
    return Availability.no(f"triton not importable ({error}); install the triton build matching torch")


def inductor_availability(device: torch.device, needs_cpp_on_cuda: bool) -> Availability:
    """Whether Inductor can build for ``device``.

    needs_cpp_on_cuda: AOT Inductor compiles a C++ wrapper around the CUDA kernels, so
        it needs a host C++ compiler on CUDA as well; torch.compile's wrapper is Python.
    """
    if device.type == "cpu":
        return cpp_compiler_availability()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device")
        triton = triton_availability()
        if not triton.available or not needs_cpp_on_cuda:
            return triton
        return cpp_compiler_availability()
    return Availability.no(f"Inductor does not compile for {device.type}")
