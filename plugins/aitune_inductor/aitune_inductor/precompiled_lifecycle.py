"""The JIT backend's side of ``precompile=True``: build, restore and activate precompiled graphs.

A mixin of :class:`aitune_inductor.jit.TorchInductorJitBackend`, apart so that the
backend's own lifecycle stays readable; what a precompiled graph is lives in
:mod:`aitune_inductor.precompiled`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aitune_core.plugin_api import BuildContext, Locator, get_logger, map_leaves
from aitune_inductor import precompiled
from aitune_inductor.calls import build_calls
from aitune_inductor.dims import mark_dynamic
from aitune_inductor.sealed import left_unread, stored_sha256
from aitune_inductor.vec_isa import checked_once
from aitune_inductor.warm_up import BOUNDED, UNBOUNDED, WarmUp, first_line, unmarked, violates_bounds


class PrecompiledLifecycle:
    """Precompiled graphs for a backend that otherwise compiles with ``torch.compile``."""

    _compiled: Any
    _cache_pending: bool
    _precompiled: precompiled.PrecompiledGraphs | None
    _precompiled_file: Path | None
    _precompiled_sha256: str
    _precompiled_pending: bool
    build_info: dict[str, Any]

    if TYPE_CHECKING:  # provided by the backend

        def resolved_dynamic(self, context: BuildContext) -> bool | None: ...
        def _compile_kwargs(self, context: BuildContext) -> dict[str, Any]: ...
        def _load_compile_cache(self, context: BuildContext) -> None: ...
        def describe(self) -> str: ...

    def _precompile(self, context: BuildContext) -> WarmUp:
        """Compile a function for each set of guards the build's calls need, and run every call on them."""
        if not precompiled.available():
            raise RuntimeError(
                f"precompile=True needs torch.compile(...).aot_compile and torch.compiler.load_compiled_function, "
                f"which torch {torch.__version__} lacks; use precompile=False, or a newer torch"
            )
        graphs = self._new_precompiled(context)
        compile_kwargs = self._compile_kwargs(context)
        mark = self.resolved_dynamic(context) is not False
        marked: list[str] = []
        dropped = ""
        with checked_once(context.device), torch.no_grad():
            for arguments in _with_dense_layouts(build_calls(context)):
                if graphs.find(*_bound(context, arguments)) is None:
                    if mark:
                        marked = mark_dynamic(arguments, context.graph_spec, bounded=not dropped)
                    try:
                        graphs.compile(*_bound(context, arguments), compile_kwargs)
                    except Exception as error:
                        if not marked or dropped or not violates_bounds(error):
                            raise _precompile_failure(error) from error
                        # The model contradicts the tuned bounds: hint the axes instead, as the JIT build does.
                        dropped = first_line(error)
                        arguments = {name: map_leaves(v, Locator(name), unmarked) for name, v in arguments.items()}
                        marked = mark_dynamic(arguments, context.graph_spec, bounded=False)
                        graphs.compile(*_bound(context, arguments), compile_kwargs)
                args, kwargs = _bound(context, arguments)
                graphs(*args, **kwargs)
        self._precompiled = self._compiled = graphs
        return WarmUp(marked, dropped, kind=UNBOUNDED if dropped else BOUNDED)

    def _new_precompiled(self, context: BuildContext) -> precompiled.PrecompiledGraphs:
        """Graphs whose refused calls compile with ``torch.compile``, as this backend does without precompiling."""

        def fallback() -> Any:
            if self._cache_pending:
                self._load_compile_cache(context)  # the compile that follows finds what the build compiled
            return torch.compile(context.module, **self._compile_kwargs(context))

        def on_fallback(reason: str) -> None:
            get_logger(module=context.module_name, graph=context.graph_spec.name).warning(
                "no precompiled graph accepts this call: compiling it now, as a JIT backend does",
                backend=self.describe(),
                reason=reason[:1000],
            )
            self.build_info["precompiled_fallback"] = reason[:1000]

        graphs = precompiled.PrecompiledGraphs(context.module, fallback)
        graphs.on_fallback = on_fallback
        return graphs

    def _use_precompiled(self, context: BuildContext) -> bool:
        """Serve from the precompiled graphs: built here, or read from a checkpoint that trusts native code."""
        if self._precompiled is not None:
            self._compiled = self._precompiled
            return True
        if not self._precompiled_pending:
            return False
        self._precompiled_pending = False
        log = get_logger(module=context.module_name, graph=context.graph_spec.name)
        if not context.trust_native_code:
            left_unread(log, "precompiled graphs", "compiled code", self.describe(), self.build_info, "precompiled")
            return False
        assert self._precompiled_file is not None
        graphs = self._new_precompiled(context)
        try:
            held = graphs.read(self._precompiled_file, self._precompiled_sha256, self.describe(), context.device)
        except precompiled.PrecompiledIncompatible as error:
            # What was saved, but not for this process (another torch): compile, as without them.
            log.warning("precompiled graphs not loaded: compiling again", backend=self.describe(), reason=str(error))
            self.build_info["precompiled"] = f"not loaded: {error}"
            return False
        log.info("precompiled graphs loaded", backend=self.describe(), **held)
        self.build_info["precompiled"] = {"loaded": held}
        self._precompiled = self._compiled = graphs
        return True

    def _restore_precompiled(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        path = artifacts.get(precompiled.PRECOMPILED_ARTIFACT)
        if path is None:
            return
        sha256 = stored_sha256(extra, "precompiled_sha256", f"{type(self).__name__}: its precompiled graphs")
        self._precompiled_file, self._precompiled_sha256, self._precompiled_pending = Path(path), sha256, True


def _bound(context: BuildContext, arguments: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args, kwargs = context.signature.bind(arguments)
    return tuple(args), dict(kwargs)


def _with_dense_layouts(calls: list[tuple[str, dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Each build call, then its copy with contiguous tensors where it had others.

    Saved guards check strides, and serving often brings the dense layout of what the
    samples held as views: a KV cache made by prefill holds transposed slices, one grown by
    decode steps holds contiguous tensors.
    """
    for _, arguments in calls:
        yield arguments
        copies = {name: precompiled.dense_copy(value, Locator(name)) for name, value in arguments.items()}
        if any(strided for _, strided in copies.values()):
            yield {name: copy for name, (copy, _) in copies.items()}


def _precompile_failure(error: BaseException) -> precompiled.PrecompileError:
    return precompiled.PrecompileError(
        f"precompile=True needs one full graph whose guards torch can save, and this graph is not: "
        f"{first_line(error)}; use precompile=False (the checkpoint then compiles where it is loaded)"
    )
