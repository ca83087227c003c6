"""Inductor's check of the CPU's vector instruction sets, done once per machine instead of once per process.

Before it compiles (or loads from its cache) C++ kernels for an x86 CPU, Inductor
checks each vector ISA the CPU reports (AVX2, AVX512, AMX, ...): it builds a small
library with that ISA's flags and loads it in a child Python. The libraries are
cached; the child processes are not: about ten of them, 1.4 s on a two-core machine,
in every process that compiles, which is most of a warm-cache JIT build.

Torch can skip that check (``cpp.vec_isa_ok=True``: every ISA the CPU reports is
usable). This module runs the real check once and records whether it agreed with the
CPU's report, keyed on what could change the answer: the machine's name, the CPU's
flags, the compiler and torch. Where it agreed, this plugin's compiles skip the check
from then on; where it rejected an ISA the CPU reports, or the user set the option,
Inductor decides as usual. The option is part of Inductor's cache key, so the plugin
sets it for every compile it makes, the first process's included: a warm cache then
finds what the first process wrote.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

RECORD_PREFIX = "vec-isa-"


@contextlib.contextmanager
def checked_once(device: torch.device) -> Iterator[None]:
    """Inductor compiles inside this block skip the ISA check where this machine passed it before."""
    if device.type != "cpu" or not _agrees():
        yield
        return
    from torch._inductor import config

    with config.patch({"cpp.vec_isa_ok": True}):
        yield


def _agrees() -> bool:
    """Whether Inductor's own check accepts every ISA the CPU reports, from the record or checked now."""
    try:
        from torch._inductor import config, cpu_vec_isa
    except ImportError:
        return False
    if config.cpp.vec_isa_ok is not None or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return _recorded_answer(cpu_vec_isa)
    except (AttributeError, OSError, ValueError, TypeError):  # another torch's internals, an unwritable cache
        return False


@functools.cache
def _recorded_answer(cpu_vec_isa: Any) -> bool:
    flags = sorted(cpu_vec_isa.x86_isa_checker())
    reported = [str(isa) for isa in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(isa).split())]
    record = _record_path(flags)
    if record.is_file():
        data = json.loads(record.read_text())
        return bool(data.get("agrees")) and data.get("reported") == reported
    checked = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # Inductor's own check, with its probes
    agrees = checked == reported
    record.parent.mkdir(parents=True, exist_ok=True)
    partial = record.with_name(f".{record.name}.{os.getpid()}")
    partial.write_text(json.dumps({"agrees": agrees, "reported": reported, "checked": checked}, indent=1))
    os.replace(partial, record)
    return agrees


def _record_path(flags: list[str]) -> Path:
    from torch._inductor.cpp_builder import get_cpp_compiler

    from aitune_core.plugin_api import config

    compiler = get_cpp_compiler()
    resolved = shutil.which(compiler) or compiler
    try:
        stat = os.stat(resolved)
        compiler_id = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        compiler_id = resolved
    identity = json.dumps([platform.node(), flags, compiler_id, torch.__version__, sys.executable])
    key = hashlib.sha256(identity.encode()).hexdigest()[:24]
    return config.cache_dir.expanduser() / "inductor" / f"{RECORD_PREFIX}{key}.json"
