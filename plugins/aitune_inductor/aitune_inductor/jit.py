"""TorchInductorJitBackend: ``torch.compile`` with Inductor, compiled for the graph's shape range.

The module itself is compiled (``torch.compile`` wraps it without changing it), with
the graph's batch and dynamic axes marked dynamic with their tuned min and max. One
compiled graph then serves every batch size in range, and a new batch size costs no
recompile; a range that starts at 1 shares that graph too where the model allows it
(:mod:`aitune_inductor.size_one`). All shapes a tuned call can bring are run while
building, so the seconds of compiling are spent in tuning, not on the first real call,
and ``build_info["recompiles"]`` counts every graph beyond the first.

What the build compiled is kept as Inductor's compile cache (:mod:`.compile_cache`), an
artifact of the backend: a checkpoint loaded with ``trust_native_code=True`` puts it
into the new process's caches before compiling, and the compile there finds every
kernel instead of generating it.
"""

from __future__ import annotations

import functools
import inspect
import time
from pathlib import Path
from typing import Any, cast

import attrs
import torch

from aitune_core.plugin_api import (
    DEFAULT_TOLERANCES,
    Availability,
    Backend,
    BackendConfig,
    BackendState,
    BuildContext,
    GraphSpec,
    Locator,
    Tolerances,
    autocast,
    cast_outputs,
    compare_outputs,
    floating_dtype,
    get_logger,
    map_leaves,
)
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_inductor import compile_cache, precompiled
from aitune_inductor.availability import inductor_availability
from aitune_inductor.calls import build_calls
from aitune_inductor.compile_watch import CompileWatch
from aitune_inductor.config_checks import check_allowed_options, check_mode, check_options, options_dict
from aitune_inductor.deployable import jit_reason
from aitune_inductor.dims import below_range, mark_dynamic, ranged_axes, reaches_size_one
from aitune_inductor.jit_refit import check_compiled_for, frozen_into_graph
from aitune_inductor.precompiled_lifecycle import PrecompiledLifecycle
from aitune_inductor.sealed import left_unread, stored_sha256
from aitune_inductor.size_one import size_oblivious, size_oblivious_available
from aitune_inductor.vec_isa import checked_once
from aitune_inductor.warm_up import (
    BOUNDED,
    FROM_ONE,
    UNBOUNDED,
    WarmUp,
    first_line,
    mark_first_call,
    unmarked,
    violates_bounds,
)


@attrs.frozen
class TorchInductorJitBackendConfig(BackendConfig):
    """How ``torch.compile`` is called.

    mode: a torch.compile mode ("default", "reduce-overhead", "max-autotune", ...:
        ``torch._inductor.list_mode_options()``).
    options: Inductor options instead of a mode (``torch._inductor.list_options()``);
        torch.compile takes one or the other, never both. Only the options on
        :data:`aitune_inductor.config_checks.INDUCTOR_OPTION_RULES` are accepted unless
        the config is made with ``unsafe_options=True`` (never stored in checkpoints).
    fullgraph: fail the build on a graph break instead of running the pieces.
    dynamic: passed to torch.compile. None decides from the graph: axes that vary are
        marked dynamic with their tuned range, and a graph without any is compiled static.
    autocast_enabled / autocast_dtype: run under ``torch.autocast``; outputs are cast back
        to the dtypes eager returns.
    precompile: compile each graph ahead of time (``torch.compile(...).aot_compile``) and
        keep the functions with their CPU kernels (:mod:`aitune_inductor.precompiled`): a
        checkpoint loaded with ``trust_native_code=True`` then traces and compiles nothing.
        Needs one full graph whose guards torch can save; a build that has not fails with why.
    """

    mode: str | None = attrs.field(default=None, validator=check_mode)
    options: dict[str, Any] | None = attrs.field(
        default=None, converter=options_dict, validator=[check_options, check_allowed_options]
    )
    fullgraph: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    dynamic: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(bool))
    )
    autocast_enabled: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    autocast_dtype: torch.dtype = attrs.field(default=torch.float16, validator=floating_dtype)
    precompile: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.mode is not None and self.options is not None:
            raise ValueError(
                f"TorchInductorJitBackendConfig takes either mode or options, not both (got mode={self.mode!r} and "
                f"options={self.options!r}); torch.compile refuses the pair. To start from a mode and change some "
                "settings, put the mode's settings (torch._inductor.list_mode_options(mode)) into options"
            )


@functools.cache
def _supports(parameter: str) -> bool:
    """Whether this torch's ``torch.compile`` takes ``parameter`` (newer ones take more)."""
    return parameter in inspect.signature(torch.compile).parameters


class TorchInductorJitBackend(PrecompiledLifecycle, Backend):
    """``torch.compile(module, backend="inductor")`` for one graph, warmed up on its shapes."""

    name = "inductor_jit"
    config_class = TorchInductorJitBackendConfig
    supported_devices = ("cpu", "cuda")

    def __init__(self, config: TorchInductorJitBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._compiled: Any = None
        self._watch: CompileWatch | None = None
        self._cache_file: Path | None = None
        self._cache_sha256 = ""
        self._cache_pending = False
        """Restored with a compile cache not yet put into this process's caches (or left out, untrusted)."""
        self._warm_up_kind = BOUNDED
        """How the kept compile marked its axes (see :func:`mark_first_call`); stored with the backend."""
        self._first_call = ""
        """Set when compiling without samples: how to mark the first call's axes."""
        self._precompiled: precompiled.PrecompiledGraphs | None = None
        self._precompiled_file: Path | None = None
        self._precompiled_sha256 = ""
        self._precompiled_pending = False
        """Restored with precompiled graphs not yet read (or left out, untrusted)."""

    @property
    def is_jit(self) -> bool:
        return True

    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """None: it compiles where it serves (see :mod:`aitune_inductor.deployable`)."""
        return jit_reason(self.describe())

    @property
    def lossy(self) -> bool:
        """Autocast computes in a narrower dtype than the module's own."""
        return bool(cast(TorchInductorJitBackendConfig, self.config).autocast_enabled)

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        base = super().availability(device)
        if not base.available:
            return base
        return inductor_availability(torch.device(device), needs_cpp_on_cuda=False)

    def can_refit(self) -> bool:
        """Yes unless the weights were frozen into the compiled code (:mod:`aitune_inductor.jit_refit`)."""
        config = cast(TorchInductorJitBackendConfig, self.config)
        return frozen_into_graph(config.options, config.precompile) is None

    def _refit(self, module: torch.nn.Module) -> None:
        """Nothing to copy: the compiled graphs read the module's weights on every call."""
        check_compiled_for(self.describe(), self.context.module if self.context is not None else None, module)

    # ------------------------------------------------------------------ building
    def resolved_dynamic(self, context: BuildContext) -> bool | None:
        """``dynamic`` as given, or derived: None (marked axes only) when the graph has ranged axes, else False."""
        config = cast(TorchInductorJitBackendConfig, self.config)
        if config.dynamic is not None:
            return config.dynamic
        return None if ranged_axes(context.graph_spec) else False

    def _compile_kwargs(self, context: BuildContext) -> dict[str, Any]:
        config = cast(TorchInductorJitBackendConfig, self.config)
        kwargs: dict[str, Any] = {
            "backend": "inductor",
            "fullgraph": config.fullgraph,
            "dynamic": self.resolved_dynamic(context),
        }
        if config.mode is not None:
            kwargs["mode"] = config.mode
        if config.options is not None:
            kwargs["options"] = dict(config.options)  # torch.compile pops keys from the dict it gets
        if _supports("isolate_recompiles"):
            # Other compiles of the same forward (another candidate, the user's own) keep their own entries.
            kwargs["isolate_recompiles"] = True
        return kwargs

    def _build(self, context: BuildContext) -> None:
        started = time.perf_counter()
        self._watch = CompileWatch()
        with compile_cache.capture() as captured:
            if cast(TorchInductorJitBackendConfig, self.config).precompile:
                warm = self._precompile(context)
            else:
                warm = self._compile_and_warm_up(context)
        report = self._watch.report()
        self.build_info = {
            "dynamic": str(self.resolved_dynamic(context)),
            "marked_dynamic": warm.marked,
            **report,
            "compile_s": round(time.perf_counter() - started, 3),
        }
        if captured.data is not None:
            self._cache_file, self._cache_sha256 = compile_cache.write(captured.data, context.cache_dir)
            self.build_info["compile_cache"] = {"bytes": len(captured.data), **captured.summary}
        if self._precompiled is not None:
            self._precompiled_file, self._precompiled_sha256, held = self._precompiled.write(context.cache_dir)
            self.build_info["precompiled"] = held
        if warm.bounds_dropped:
            self.build_info["bounds_dropped"] = warm.bounds_dropped
        if warm.size_one:
            self.build_info["size_one"] = warm.size_one
        self._warm_up_kind = warm.kind

    def _shares_size_one(self, context: BuildContext) -> bool:
        """Whether to try one graph for a range that starts at 1 (see :mod:`aitune_inductor.size_one`).

        A retry must not find the shared graph again, so this needs compiles that keep
        their own entries (``isolate_recompiles``).
        """
        return (
            self.resolved_dynamic(context) is None
            and reaches_size_one(context.graph_spec)
            and size_oblivious_available()
            and _supports("isolate_recompiles")
        )

    def _compile_and_warm_up(self, context: BuildContext) -> WarmUp:
        """Compile and run every build call: on one graph from size 1 where the model
        allows it, else on one graph from size 2 and another for size 1."""
        if self._watch is None:  # restored from a checkpoint: count from the first activation
            self._watch = CompileWatch()
        if not context.samples:
            # A checkpoint may hold no samples (inputs it cannot store); compile on the first
            # call, with its axes marked as the build marked them: the same compile as the
            # build's, which a loaded compile cache serves, rather than one per size.
            self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
            self._first_call = self._warm_up_kind if self.resolved_dynamic(context) is not False else ""
            return WarmUp([])
        calls = [arguments for _, arguments in build_calls(context)]
        with checked_once(context.device):
            return self._warm_up_all(context, calls)

    def _warm_up_all(self, context: BuildContext, calls: list[dict[str, Any]]) -> WarmUp:
        size_one = ""
        if self._shares_size_one(context):
            marked: list[str] = []
            try:
                marked, mismatch = self._warm_up_from_size_one(context, calls)
            except Exception as error:
                mismatch = first_line(error)
            if not mismatch:
                return WarmUp(marked, size_one=self._size_one_outcome(), kind=FROM_ONE)
            size_one = f"own graph: {mismatch}"
            self._watch = CompileWatch()  # the report covers the compile that is kept
        marked, bounds_dropped = self._warm_up(context, calls)
        return WarmUp(marked, bounds_dropped, size_one, kind=UNBOUNDED if bounds_dropped else BOUNDED)

    def _size_one_outcome(self) -> str:
        """What became of size 1: "shared", or the guard that still made torch compile another graph."""
        assert self._watch is not None
        reasons = self._watch.recompile_reasons()
        if not self._watch.report()["recompiles"]:
            return "shared"
        return f"recompiled: {reasons[0]}" if reasons else "recompiled"

    def _warm_up_from_size_one(self, context: BuildContext, calls: list[dict[str, Any]]) -> tuple[list[str], str]:
        """Compile with ranges from 1, run the calls and compare size-1 outputs with eager.
        Returns the axes marked and how the outputs differ ("" when they agree)."""
        assert self._watch is not None
        self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
        marked = mark_dynamic(calls[0], context.graph_spec, bounded=True, floor=1)
        for index, arguments in enumerate(calls):
            if index == 0:
                with size_oblivious():
                    outputs = self._run(context, arguments)
                self._watch.first_call_done()
            else:
                outputs = self._run(context, arguments)
            if below_range(arguments, context.graph_spec):
                args, kwargs = context.signature.bind(arguments)
                with torch.no_grad():
                    problem = compare_outputs(outputs, context.module(*args, **kwargs), self._size_one_tolerances())
                if problem.problem:
                    return marked, problem.problem
        return marked, ""

    def _size_one_tolerances(self) -> Tolerances:
        """How close to eager the shared graph must be at size 1: as validation's defaults, or
        under autocast as the dtype it computes in (a size-1 mistake is far larger)."""
        config = cast(TorchInductorJitBackendConfig, self.config)
        if not config.autocast_enabled:
            return self.default_tolerances()
        tolerance = DEFAULT_TOLERANCES.get(config.autocast_dtype, DEFAULT_TOLERANCES[torch.bfloat16])
        return Tolerances.uniform(tolerance.atol, tolerance.rtol)

    def _warm_up(self, context: BuildContext, calls: list[dict[str, Any]]) -> tuple[list[str], str]:
        """Compile with ranges from 2 and run the calls. Returns the axes marked dynamic and,
        when the model contradicted the tuned bounds, why they were dropped."""
        assert self._watch is not None
        mark = self.resolved_dynamic(context) is not False
        marked: list[str] = []
        note = ""
        self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
        first = calls[0]
        if mark:
            marked = mark_dynamic(first, context.graph_spec, bounded=True)
        try:
            self._run(context, first)
        except Exception as error:
            if not marked or not violates_bounds(error):
                raise
            # The model forces a relation or specialisation the bounds contradict: let Dynamo
            # find the ranges itself, so the build still yields one dynamic graph.
            note = first_line(error)
            self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
            first = {name: map_leaves(value, Locator(name), unmarked) for name, value in first.items()}
            marked = mark_dynamic(first, context.graph_spec, bounded=False)
            self._run(context, first)
        self._watch.first_call_done()
        for arguments in calls[1:]:
            self._run(context, arguments)
        return marked, note

    def _run(self, context: BuildContext, arguments: dict[str, Any]) -> Any:
        args, kwargs = context.signature.bind(arguments)
        with torch.no_grad():
            return self._infer(*args, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def _activate(self) -> None:
        if self.context is None:
            raise RuntimeError(
                "TorchInductorJitBackend compiles the original module when activated; pass a BuildContext"
            )
        if self._precompiled_file is not None and self._use_precompiled(self.context):
            return
        if self._cache_pending:
            self._load_compile_cache(self.context)
        elif self._cache_file is None and self.state is BackendState.CHECKPOINT_LOADED:
            # Restored from a checkpoint that holds no compile cache: this activation compiles, and says so.
            get_logger(module=self.context.module_name, graph=self.context.graph_spec.name).warning(
                "the checkpoint holds no compile cache for this backend (the torch that tuned it could not save "
                "one): compiling at load, as tuning did; tune and save again with this torch to keep the kernels",
                backend=self.describe(),
            )
            self.build_info["compile_cache"] = "none in the checkpoint"
        # Dynamo's and Inductor's caches make this fast when the same module was compiled before.
        self._compile_and_warm_up(self.context)

    def _load_compile_cache(self, context: BuildContext) -> None:
        """Put the stored compile cache into this process's caches, when the load trusts native code."""
        assert self._cache_file is not None
        log = get_logger(module=context.module_name, graph=context.graph_spec.name)
        self._cache_pending = False
        if not context.trust_native_code:
            left_unread(log, "compile cache", "compiled kernels", self.describe(), self.build_info, "compile_cache")
            return
        held = compile_cache.load(self._cache_file, self._cache_sha256, self.describe())
        log.info("compile cache loaded", backend=self.describe(), artifacts=held)
        self.build_info["compile_cache"] = {"loaded": held}

    def _deactivate(self) -> None:
        # Dropping the compiled wrapper is all this backend owns; Dynamo's process-wide
        # state (other compiles, the user's own) is left alone: no torch._dynamo.reset().
        self._compiled = None

    # ------------------------------------------------------------------ persistence
    def _artifacts(self) -> dict[str, Path]:
        artifacts = {compile_cache.COMPILE_CACHE_ARTIFACT: self._cache_file} if self._cache_file is not None else {}
        if self._precompiled_file is not None:
            artifacts[precompiled.PRECOMPILED_ARTIFACT] = self._precompiled_file
        return artifacts

    def _extra_state(self) -> dict[str, Any]:
        extra = {"warm_up": self._warm_up_kind}
        if self._cache_file is not None:
            extra["compile_cache_sha256"] = self._cache_sha256
        if self._precompiled_file is not None:
            extra["precompiled_sha256"] = self._precompiled_sha256
        return extra

    def native_artifacts(self) -> frozenset[str]:
        """The compile cache holds pickled objects and compiled kernels, which run when it is loaded."""
        return frozenset(self._artifacts())

    def optional_native_artifacts(self) -> frozenset[str]:
        """Without the compile cache the backend compiles again, as it would without a checkpoint."""
        return frozenset(self._artifacts())

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        kind = extra.get("warm_up", BOUNDED)
        if kind not in (BOUNDED, UNBOUNDED, FROM_ONE):
            raise ValueError(f"{type(self).__name__}: unknown warm_up {kind!r} in its stored state")
        self._warm_up_kind = kind
        self._restore_precompiled(artifacts, extra)
        path = artifacts.get(compile_cache.COMPILE_CACHE_ARTIFACT)
        if path is None:
            return
        sha256 = stored_sha256(extra, "compile_cache_sha256", f"{type(self).__name__}: its compile cache")
        self._cache_file, self._cache_sha256, self._cache_pending = Path(path), sha256, True

    def compile_stats(self) -> dict[str, Any]:
        """Graphs, graph breaks and recompiles since this backend was built (process-wide counters)."""
        if self._watch is None:
            return {"graphs": 0, "graph_breaks": 0, "recompiles": 0, "break_reasons": []}
        return self._watch.report()

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._compiled
        config = cast(TorchInductorJitBackendConfig, self.config)
        if self._first_call:
            kind, self._first_call = self._first_call, ""
            assert self.context is not None
            if kind == FROM_ONE:
                mark_first_call(kind, self.context, args, kwargs)
                with size_oblivious():
                    return self._infer(*args, **kwargs)
            mark_first_call(kind, self.context, args, kwargs)
        if torch.is_grad_enabled():
            # Dynamo guards on grad mode: calls with and without grad would compile twice.
            with torch.no_grad():
                return self._call(compiled, config, args, kwargs)
        return self._call(compiled, config, args, kwargs)

    def _call(self, compiled: Any, config: TorchInductorJitBackendConfig, args: Any, kwargs: Any) -> Any:
        if not config.autocast_enabled:
            return compiled(*args, **kwargs)
        assert self.context is not None
        with autocast(True, self.context.device, config.autocast_dtype):
            outputs = compiled(*args, **kwargs)
        return cast_outputs(outputs, self.context.graph_spec.output_spec)

    def inference_callable(self) -> Any:
        config = cast(TorchInductorJitBackendConfig, self.config)
        if self._compiled is not None and not config.autocast_enabled and not self._first_call:
            return self._compiled
        return self._infer
