"""TorchInductorJitBackend: ``torch.compile`` with Inductor, compiled for the graph's shape range.

The module itself is compiled (``torch.compile`` wraps it without changing it), with
the graph's batch and dynamic axes marked dynamic with their tuned min and max. One
compiled graph then serves every batch size in range, and a new batch size costs no
recompile. All shapes a tuned call can bring are run while building, so the seconds
of compiling are spent in tuning, not on the first real call.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any

import attrs
import torch

from aitune_core.backends.autocast import autocast, cast_outputs
from aitune_core.backends.base import Availability, Backend, BackendConfig, BuildContext
from aitune_core.backends.eager import floating_dtype
from aitune_core.metadata.locator import Locator, map_leaves
from aitune_inductor.availability import inductor_availability
from aitune_inductor.calls import build_calls
from aitune_inductor.compile_watch import CompileWatch
from aitune_inductor.config_checks import check_allowed_options, check_mode, check_options, options_dict
from aitune_inductor.dims import mark_dynamic, ranged_axes


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


class TorchInductorJitBackend(Backend):
    """``torch.compile(module, backend="inductor")`` for one graph, warmed up on its shapes."""

    name = "inductor_jit"
    config_class = TorchInductorJitBackendConfig
    supported_devices = ("cpu", "cuda")

    def __init__(self, config: TorchInductorJitBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._compiled: Any = None
        self._watch: CompileWatch | None = None

    @property
    def is_jit(self) -> bool:
        return True

    @property
    def lossy(self) -> bool:
        """Autocast computes in a narrower dtype than the module's own."""
        return bool(self.config.autocast_enabled)  # type: ignore[attr-defined]

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        base = super().availability(device)
        if not base.available:
            return base
        return inductor_availability(torch.device(device), needs_cpp_on_cuda=False)

    # ------------------------------------------------------------------ building
    def resolved_dynamic(self, context: BuildContext) -> bool | None:
        """``dynamic`` as given, or derived: None (marked axes only) when the graph has ranged axes, else False."""
        config: TorchInductorJitBackendConfig = self.config  # type: ignore[assignment]
        if config.dynamic is not None:
            return config.dynamic
        return None if ranged_axes(context.graph_spec) else False

    def _compile_kwargs(self, context: BuildContext) -> dict[str, Any]:
        config: TorchInductorJitBackendConfig = self.config  # type: ignore[assignment]
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
        marked, bounds_note = self._compile_and_warm_up(context)
        report = self._watch.report()
        self.build_info = {
            "dynamic": str(self.resolved_dynamic(context)),
            "marked_dynamic": marked,
            **report,
            "compile_s": round(time.perf_counter() - started, 3),
        }
        if bounds_note:
            self.build_info["bounds_dropped"] = bounds_note

    def _compile_and_warm_up(self, context: BuildContext) -> tuple[list[str], str]:
        """Compile and run every build call. Returns the axes marked dynamic and, when the
        model contradicted the tuned bounds, why they were dropped."""
        if self._watch is None:  # restored from a checkpoint: count from the first activation
            self._watch = CompileWatch()
        if not context.samples:
            # A checkpoint may hold no samples (inputs it cannot store); compile on the first call.
            self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
            return [], ""
        calls = build_calls(context)
        mark = self.resolved_dynamic(context) is not False
        marked: list[str] = []
        note = ""
        self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
        _, first = calls[0]
        if mark:
            marked = mark_dynamic(first, context.graph_spec, bounded=True)
        try:
            self._run(context, first)
        except Exception as error:
            if not marked or not _violates_bounds(error):
                raise
            # The model forces a relation or specialisation the bounds contradict: let Dynamo
            # find the ranges itself, so the build still yields one dynamic graph.
            note = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            self._compiled = torch.compile(context.module, **self._compile_kwargs(context))
            first = {name: map_leaves(value, Locator(name), _unmarked) for name, value in first.items()}
            marked = mark_dynamic(first, context.graph_spec, bounded=False)
            self._run(context, first)
        self._watch.first_call_done()
        for _, arguments in calls[1:]:
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
        # Dynamo's and Inductor's caches make this fast when the same module was compiled before.
        self._compile_and_warm_up(self.context)

    def _deactivate(self) -> None:
        # Dropping the compiled wrapper is all this backend owns; Dynamo's process-wide
        # state (other compiles, the user's own) is left alone: no torch._dynamo.reset().
        self._compiled = None

    def compile_stats(self) -> dict[str, Any]:
        """Graphs, graph breaks and recompiles since this backend was built (process-wide counters)."""
        if self._watch is None:
            return {"graphs": 0, "graph_breaks": 0, "recompiles": 0, "break_reasons": []}
        return self._watch.report()

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._compiled
        config: TorchInductorJitBackendConfig = self.config  # type: ignore[assignment]
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
        config: TorchInductorJitBackendConfig = self.config  # type: ignore[assignment]
        if self._compiled is not None and not config.autocast_enabled:
            return self._compiled
        return self._infer


def _unmarked(_locator: Locator, leaf: Any) -> Any:
    """A copy without Dynamo's dynamic-dim marks, which live on the tensor object."""
    return leaf.clone() if isinstance(leaf, torch.Tensor) else leaf


def _violates_bounds(error: BaseException) -> bool:
    """Whether Dynamo refused the marked ranges (the model specialises or relates those axes)."""
    seen: BaseException | None = error
    while seen is not None:
        if "Constraint" in type(seen).__name__ or "Constraints violated" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
