"""Precompiled graphs: a JIT winner that deploys without tracing or compiling.

A JIT checkpoint compiles again where it is loaded. Even with Inductor's compile cache
loaded, Dynamo traces the module once more, and on a CPU the C++ compiler builds every
kernel again (the cache holds the kernels' sources, not their shared libraries): about
20 s for a two-layer GPT-2 on two cores. With ``precompile=True`` the JIT backend
compiles each graph through torch's ahead-of-time entry point
(``torch.compile(...).aot_compile``), whose result runs without Dynamo, and keeps it
with the shared libraries of its CPU kernels. A load that trusts native code puts the
libraries into Inductor's cache folder and calls the saved functions: nothing is traced
and nothing is compiled.

One artifact, a zip file:
- ``manifest.json``: the functions' files, the kernel libraries, and the Python modules
  the functions' code reads through global names Dynamo made up while building;
- ``functions/N.bin``: torch's serialised functions, pickled objects and code;
- ``kernels/<key>.main.so``: the kernels, compiled C++.
Both run when loaded: native code, read only with ``trust_native_code=True``.

Guards. A saved function keeps the guards that mean the same thing in another process:
tensor metadata and dynamic-shape ranges, global state (grad mode, autocast), and the
values of constant arguments. Identity guards (this module object, its functions) and
guards on globals cannot cross processes and are dropped; aitune's routing checks what
they protected: the graph key holds the arguments' structure and constants, the range
check the shapes, the staleness watch the weights and modes. One function is compiled
per set of guards the build's calls need (a KV cache made by prefill has other strides
than one made by decode); a call that no function accepts is compiled by Dynamo, as a
JIT backend does, with a warning.

Kernel libraries are found by content: a loaded kernel belongs to a function when its
C++ source is in that function's serialised code. Their file names hash the source and
the compiler's command line, so a machine whose torch lives at another path compiles
them again (slower, same result).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tempfile
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aitune_core.plugin_api import Locator, map_leaves
from aitune_inductor.sealed import read_sealed, write_sealed
from aitune_inductor.vec_isa import checked_once

PRECOMPILED_ARTIFACT = "precompiled"
PRECOMPILED_FILE = "inductor-precompiled.zip"
MAX_FUNCTIONS = 8
"""More guard sets than this means the graph's calls are not one graph's: the rest compile as JIT."""

_FORMAT = 1
_MODULE_KEY = "module"
_KERNEL_NAME = re.compile(r"^[a-z0-9]{16,128}\.main\.so$")
_PROBE_NAME = re.compile(r"^[a-z0-9]{16,128}\.so$")
_BINDINGS_MARK = "// Python bindings to call"
"""Where Inductor's Python bindings start in a kernel's C++ file; the kernel is what comes before."""
_DYNAMO_GLOBAL = re.compile(r"^___module_\w+$")


class PrecompileError(RuntimeError):
    """A precompiled artifact that cannot be made, or cannot be trusted to be what was saved."""


class PrecompiledIncompatible(PrecompileError):
    """Saved functions, checked to be what was saved, that this process cannot load (another torch, say)."""


def available() -> bool:
    """Whether this torch saves and loads ahead-of-time compiled functions."""
    return hasattr(torch.compiler, "load_compiled_function") and hasattr(torch.compiler, "keep_portable_guards_unsafe")


def call_module(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """What is compiled: the module's call, with the module as an argument (its weights stay inputs)."""
    return module(*args, **kwargs)


def portable_guards(entries: list[Any]) -> list[bool]:
    """Torch's portable guards (tensors, shapes, global state) and local constants, where torch can save them."""
    keep = torch.compiler.keep_portable_guards_unsafe(entries)
    return [
        (kept or (not entry.is_global and entry.guard_type in ("CONSTANT_MATCH", "EQUALS_MATCH")))
        and not _UNSAVABLE.intersection((entry.guard_type, *(entry.derived_guard_types or ())))
        for kept, entry in zip(keep, entries, strict=True)
    ]


_UNSAVABLE = frozenset(
    {"DICT_VERSION", "NN_MODULE", "ID_MATCH", "FUNCTION_MATCH", "CLASS_MATCH", "MODULE_MATCH", "CLOSURE_MATCH"}
    | {"WEAKREF_ALIVE"}
)
"""Guards on objects' identities, which torch refuses to save (a constant None is checked by identity too)."""


class PrecompiledGraphs:
    """The functions of one graph, each tried by its guards; calls none accepts go to ``fallback``.

    fallback: makes the Dynamo-compiled callable for such calls, on the first of them.
    """

    def __init__(self, module: torch.nn.Module, fallback: Callable[[], Callable[..., Any]]) -> None:
        self.module = module
        self.functions: list[Any] = []
        self._dense: dict[int, bool] = {}
        """Per function, whether its outputs held strided views to make contiguous (found on its first call)."""
        self._fallback_factory = fallback
        self._fallback: Callable[..., Any] | None = None
        self.on_fallback: Callable[[str], None] = lambda _reason: None

    def find(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        """The index of the first function whose guards accept the call, or None."""
        for index, function in enumerate(self.functions):
            if function.guard_check(self.module, *args, **kwargs):
                return index
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        index = self.find(args, kwargs)
        if index is not None:
            outputs = self.functions[index].fn(self.module, *args, **kwargs)
            if self._dense.get(index, True):
                outputs, self._dense[index] = dense_copy(outputs, Locator("output"))
            return outputs
        if self._fallback is None:
            self.on_fallback(self.refusal(args, kwargs))
            self._fallback = self._fallback_factory()
        return self._fallback(*args, **kwargs)

    def refusal(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Why each function refuses a call, in Dynamo's words."""
        if not self.functions:
            return "no precompiled function"
        reasons = []
        for index, function in enumerate(self.functions):
            try:
                f_locals = function.prepare_f_locals(self.module, *args, **kwargs)
                failed = function._artifacts.guard_manager.check_verbose(f_locals).verbose_code_parts
                reasons.append(f"{index}: {'; '.join(map(str, failed))}")
            except Exception as error:  # the reason is for a log line; never fail the call over it
                reasons.append(f"{index}: {type(error).__name__}: {error}")
        return " | ".join(reasons)

    def compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], compile_kwargs: dict[str, Any]) -> None:
        """Compile one more function on this call; it must then accept the call."""
        if len(self.functions) >= MAX_FUNCTIONS:
            raise PrecompileError(f"the build's calls need more than {MAX_FUNCTIONS} sets of guards")
        compiled: Any = torch.compile(call_module, **_aot_kwargs(compile_kwargs))
        with torch._dynamo.config.patch(specialize_float=True):  # aot_compile cannot restart on tensorified floats
            function = compiled.aot_compile(((self.module, *args), kwargs))
        self.functions.append(function)
        if self.find(args, kwargs) is None:
            raise PrecompileError(f"the function compiled on a call refuses that call: {self.refusal(args, kwargs)}")

    # ------------------------------------------------------------------ the artifact
    def write(self, folder: Path) -> tuple[Path, str, dict[str, int]]:
        """Save the functions and their kernels as one file in ``folder``; returns it, its sha256 and counts.

        The saved functions are loaded back here first, so a graph whose code cannot be
        restored elsewhere fails its build now instead of its deployment.
        """
        blobs = [_serialize(function, self.module) for function in self.functions]
        modules = _dynamo_modules()
        _deserialize(blobs, modules, self.module)
        kernels = {**_kernel_libraries(blobs), **_isa_probes()}
        names = [f"functions/{index}.bin" for index in range(len(blobs))]
        manifest = {
            "format": _FORMAT,
            "torch": torch.__version__,
            "functions": names,
            "kernels": sorted(kernels),
            "modules": modules,
        }
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
            for name, blob in zip(names, blobs, strict=True):
                archive.writestr(name, blob)
            for name, path in sorted(kernels.items()):
                archive.writestr(f"kernels/{name}", path.read_bytes())
        data = buffer.getvalue()
        path = folder / PRECOMPILED_FILE
        sha256 = write_sealed(data, path)
        return path, sha256, {"functions": len(blobs), "kernels": len(kernels), "bytes": len(data)}

    def read(self, path: Path, sha256: str, what: str, device: torch.device) -> dict[str, int]:
        """Load the functions saved at ``path`` (checked against ``sha256``), their kernels into Inductor's cache.

        The libraries go in first: Inductor's check of the CPU's vector features, which
        loading a kernel runs, then finds its probe programs built.
        """
        data = read_sealed(path, sha256, f"{what}: its precompiled graphs", PrecompileError)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                manifest = json.loads(archive.read("manifest.json"))
                _check_manifest(manifest)
                installed = _install_kernels(archive, manifest["kernels"])
                blobs = [archive.read(name) for name in manifest["functions"]]
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as error:
            raise PrecompileError(f"{what}: its precompiled graphs {path} are not readable: {error}") from None
        with checked_once(device):
            self.functions = _deserialize(blobs, manifest["modules"], self.module)
        return {"functions": len(self.functions), "kernels": len(manifest["kernels"]), "kernels_installed": installed}


def dense_copy(value: Any, locator: Locator) -> tuple[Any, bool]:
    """``value`` with every strided tensor made contiguous, and whether one was (``value`` itself if none).

    A graph's outputs often feed another graph (prefill's KV cache feeds decode), whose
    saved guards check strides. The layouts a compiled graph returns differ from eager's,
    which the recorded samples hold: outputs returned contiguous meet the dense layout the
    build also compiles every strided call for, with this same copy.
    """
    strided = False

    def dense(_locator: Locator, leaf: Any) -> Any:
        nonlocal strided
        if isinstance(leaf, torch.Tensor) and not leaf.is_contiguous():
            strided = True
            return leaf.contiguous()
        return leaf

    rebuilt = map_leaves(value, locator, dense)
    return (rebuilt, True) if strided else (value, False)


def _aot_kwargs(compile_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The build's torch.compile arguments, as one full graph with portable guards."""
    kwargs = dict(compile_kwargs)
    options = dict(kwargs.pop("options", None) or {})
    mode = kwargs.pop("mode", None)
    if mode is not None:  # guard_filter_fn travels in options, and torch.compile takes a mode or options
        options = {**torch._inductor.list_mode_options(mode), **options}
    options["guard_filter_fn"] = portable_guards
    kwargs.pop("isolate_recompiles", None)
    return {**kwargs, "fullgraph": True, "options": options}


def _serialize(function: Any, module: torch.nn.Module) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        saved = function.save_compiled_function(str(Path(folder) / "f.bin"), external_data={_MODULE_KEY: module})
    return bytes(saved.serialized_data)


def _deserialize(blobs: list[bytes], modules: dict[str, str], module: torch.nn.Module) -> list[Any]:
    import importlib

    try:
        scope: dict[str, object] = {name: importlib.import_module(target) for name, target in modules.items()}
        return [
            torch.compiler.load_compiled_function(
                io.BytesIO(blob), f_globals=scope, external_data={_MODULE_KEY: module}
            )
            for blob in blobs
        ]
    except Exception as error:  # torch's loader raises what its unpickling and version checks raise
        raise PrecompiledIncompatible(
            f"a saved function does not load here: {type(error).__name__}: {str(error)[:300]}"
        ) from None


def _dynamo_modules() -> dict[str, str]:
    """The modules Dynamo put into this module's globals for compiled code to read: name -> module name."""
    return {
        name: value.__name__
        for name, value in list(globals().items())
        if _DYNAMO_GLOBAL.match(name) and isinstance(value, types.ModuleType)
    }


def _kernel_libraries(blobs: list[bytes]) -> dict[str, Path]:
    """The loaded C++ kernel libraries whose source is in one of ``blobs``: file name -> path."""
    found: dict[str, Path] = {}
    for name, loaded in list(sys.modules.items()):
        file = getattr(loaded, "__file__", None)
        if not name.endswith(".kernel") or not isinstance(file, str) or not _KERNEL_NAME.match(Path(file).name):
            continue
        try:
            source = Path(file).with_suffix(".cpp").read_text()
        except OSError:
            continue
        kernel = source.split(_BINDINGS_MARK)[0].strip().encode()
        if kernel and any(kernel in blob for blob in blobs):
            found[Path(file).name] = Path(file)
    return found


def _isa_probes() -> dict[str, Path]:
    """The libraries Inductor built to probe the CPU's vector features (AVX-512 BF16, VNNI, AMX).

    Loading kernels runs those probes again in a new cache folder, compiling each (about
    0.5 s apiece on two cores); carried along, they are only loaded. Found by their
    source, which is one of Inductor's probe programs.
    """
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        return {}
    programs = {
        value.strip()
        for isa in vars(cpu_vec_isa).values()
        if isinstance(isa, type) and issubclass(isa, cpu_vec_isa.VecISA)
        for name, value in vars(isa).items()
        if name.endswith("_code") and isinstance(value, str)
    }
    found: dict[str, Path] = {}
    for source in Path(cache_dir()).glob("*/*.cpp"):
        library = source.with_suffix(".so")
        if not _PROBE_NAME.match(library.name) or not library.is_file() or source.stat().st_size > 8192:
            continue
        try:
            if source.read_text().strip() in programs:
                found[library.name] = library
        except (OSError, UnicodeDecodeError):
            continue
    return found


def _library_name(name: str) -> bool:
    return bool(_KERNEL_NAME.match(name) or _PROBE_NAME.match(name))


def _check_manifest(manifest: Any) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise ValueError(f"unknown manifest format {manifest.get('format') if isinstance(manifest, dict) else None!r}")
    functions, kernels, modules = manifest.get("functions"), manifest.get("kernels"), manifest.get("modules")
    if not isinstance(functions, list) or not all(isinstance(name, str) for name in functions):
        raise ValueError("its functions are not a list of names")
    if not isinstance(kernels, list) or not all(isinstance(n, str) and _library_name(n) for n in kernels):
        raise ValueError("a kernel library has a name Inductor never gives")
    if not isinstance(modules, dict) or not all(
        isinstance(k, str) and _DYNAMO_GLOBAL.match(k) and isinstance(v, str) for k, v in modules.items()
    ):
        raise ValueError("its module names are not Dynamo's")


def _install_kernels(archive: zipfile.ZipFile, names: list[str]) -> int:
    """Put the kernel libraries where Inductor looks for them; returns how many were not there yet."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = Path(cache_dir())
    installed = 0
    for name in names:
        target = root / name[1:3] / name  # Inductor's layout: the hash's second and third characters
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{name}.{os.getpid()}.partial")
        partial.write_bytes(archive.read(f"kernels/{name}"))
        partial.chmod(0o755)
        os.replace(partial, target)
        installed += 1
    return installed
