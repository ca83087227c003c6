"""Every hook a plugin can implement, in one module, as pytest and pluggy keep theirs: the whole plugin API in one
place, and the source of ``docs/hooks.md`` (``python -m aitune_core.plugins.hookspecs --markdown``, written by
:mod:`aitune_core.plugins.hook_reference`, which a plugin never loads).

Compatibility rule: a hook only ever gains arguments. pluggy passes an implementation just the arguments it names, so
implementations written against an older version of a hook keep working. Removing a hook or changing what one means
raises ``PLUGIN_API_VERSION``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Generator, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from aitune_core.plugins.api import PROJECT_NAME

if TYPE_CHECKING:
    import cattrs
    import torch

    from aitune_core.backends.base import Backend
    from aitune_core.deploy.target import DeployTarget
    from aitune_core.executors.base import Executor
    from aitune_core.module.wrapper import Module
    from aitune_core.plugins.records import Candidate, ContainerRegistrar

hookspec = pluggy.HookspecMarker(PROJECT_NAME)

WRAPPER_ONLY = frozenset({"aitune_wrap_step"})
"""Hooks whose implementations must be wrappers (``@hookimpl(wrapper=True)``)."""


# --------------------------------------------------------------------------- registration
@hookspec
def aitune_register_backends() -> Sequence[type[Backend]]:
    """Register backend classes.

    **Why.** Backends are looked up by name when a checkpoint is loaded and when a user asks for one by name, so
    every backend class needs a stable name that no other plugin uses. The name is the class attribute
    `Backend.name`; the attrs config class is `Backend.config_class`. Two plugins registering one name are both
    refused.

    **When.** Once, while plugins are loaded: by the first `Module()`, `tune()`, `load()` or `aitune plugins` of a
    process, never at `import aitune_core` nor by a backend built by hand. A class that is not a concrete `Backend`
    subclass with a valid name and an attrs config class refuses the plugin, with the reason.

    **Returns** a sequence of `Backend` subclasses (not instances).

    ```python
    @hookimpl
    def aitune_register_backends():
        return [TorchScriptBackend]
    ```
    """
    raise NotImplementedError


@hookspec
def aitune_register_containers(containers: ContainerRegistrar) -> None:
    """Teach metadata capture to walk into a library's container types.

    **Why.** Recording finds tensors inside lists, tuples, dicts, namedtuples and dataclasses on its own. Other
    containers (a library's output classes) are leaves unless registered, and their tensors are then invisible to
    graph keys and specs.

    **When.** Once, while plugins are loaded. The registrations take effect together with the rest of the plugin; a
    plugin that fails to load registers nothing.

    **Arguments.** `containers.register(cls, flatten, unflatten, step_kind="attr", name=None)` takes the same
    arguments as `aitune_core.metadata.register_container`.

    ```python
    @hookimpl
    def aitune_register_containers(containers):
        containers.register(
            ModelOutput,
            flatten=lambda o: [(k, getattr(o, k)) for k in o.keys()],
            unflatten=lambda o, children: ModelOutput(**dict(zip(o.keys(), children))),
        )
    ```
    """


# --------------------------------------------------------------------------- graph keying
@hookspec
def aitune_graph_key_parts(arguments: dict[str, Any]) -> Hashable | None:
    """Contribute an extra part to the graph key of a call.

    **Why.** Calls with the same structure share a graph. When something outside the arguments' structure changes
    what the module computes (a global mode, an attribute of an argument that is not a container), a plugin can
    split those calls into separate graphs.

    **When.** On every call of a wrapped module, recording and tuned alike (but see `aitune_graph_key_reads`), so keep
    it fast. A module wrapped while no plugin implements this hook never asks it. An implementation that raises
    disables its plugin, and calls go on without its part.

    **Arguments.** `arguments`: the call normalised against the forward signature, keyed by parameter name.
    **Returns** a value made of plain data (str, int, float, bool, None and tuples of them, so that checkpoints can
    store it), or `None` for no part. Parts are keyed by plugin and ordered by it, so plugins cannot collide.

    ```python
    @hookimpl
    def aitune_graph_key_parts(arguments):
        image = arguments.get("image")
        return "channels_last" if image is not None and image.is_contiguous(
            memory_format=torch.channels_last) else None
    ```
    """


@hookspec
def aitune_graph_key_reads() -> Collection[str] | None:
    """Declare under which names `aitune_graph_key_parts` reads a plain tensor, so other calls skip it.

    **Why.** A tuned module called with one plain `torch.Tensor` (`model(x)`) asks each key-part hook on every call;
    where every such plugin declares that it never keys that call, none is asked.

    **When.** Once per set of routes a module installs, never per call. Without an answer (the hook not implemented,
    or `None`) the plugin is asked on every call.

    **Returns** the parameter names whose plain tensors the part reads (empty for none): a promise that a call whose
    only argument is a plain tensor under another name gets no part.

    ```python
    @hookimpl
    def aitune_graph_key_reads():
        return ("cache_position",)
    ```
    """


# --------------------------------------------------------------------------- strategy selection
@hookspec
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """Propose backends to try on `device` when the user names none.

    **Why.** A user who installs a plugin expects its backends to be tried without naming them. Each proposal
    carries a priority (higher is tried first; the eager baseline has priority 0) and, optionally, its availability
    with a reason; when left out, the registry asks `backend.availability(device)`. Unavailable candidates are
    listed, and strategies skip them and log why.

    **When.** Each time the default candidates are asked for, typically once per tuning run. Candidates are ordered
    by priority, then backend name, so the order never depends on which plugin loaded first.

    **Returns** a sequence of `Candidate(backend, priority=100, availability=None)`, or `None`. The backend must be
    an instance of a registered class; it is a blueprint, never built itself.

    ```python
    @hookimpl
    def aitune_default_candidates(device):
        if device.type != "cuda":
            return None
        return [Candidate(TensorRTBackend(precision="fp16"), priority=200)]
    ```
    """


@hookspec(firstresult=True)
def aitune_choose_strategy(module: Module, device: torch.device) -> Any | None:
    """Choose the tuning strategy of a module whose user did not choose one.

    **Why.** A plugin that knows a family of models (say, diffusion UNets) may know a better strategy than the default.

    **When.** When tuning starts on a module whose `strategy` is `None`. Plugins are asked in pluggy's order:
    `@hookimpl(tryfirst=True)` first, `trylast=True` last, and otherwise the plugin registered last (plugins
    register in order of distribution name) first. The first answer that is not `None` ends the call.

    **Returns** a `TuneStrategy` instance, or `None` to leave the choice to others. Anything else (a strategy class,
    say) is refused with a warning naming your distribution, and the default strategy is used.

    ```python
    @hookimpl
    def aitune_choose_strategy(module, device):
        if type(module.module).__name__ == "UNet2DConditionModel":
            return MinLatencyStrategy(backends=[...])
        return None
    ```
    """


# --------------------------------------------------------------------------- backend lifecycle
@hookspec
def aitune_before_step(step: str, backend: Backend) -> None:
    """Observe a backend lifecycle step before it runs.

    **Why.** Progress displays, tracing and resource accounting need to know when a build or activation starts.

    **When.** Before every `build`, `activate`, `deactivate`, `deploy` and `refit` of every backend, after the state
    machine has accepted the step. `step` is one of those five names; `backend.context` holds the `BuildContext`
    where there is one. An exception raised here is a fault of the plugin, not of the step: the plugin is disabled
    and the step runs without it.

    ```python
    @hookimpl
    def aitune_before_step(step, backend):
        print(f"{step} {backend.describe()} ...")
    ```
    """


@hookspec
def aitune_wrap_step(step: str, backend: Backend) -> Generator[None, None, None]:
    """Wrap a backend lifecycle step: run code around it, in its context.

    **Why.** Some work must surround the step itself: a CUDA memory pool, an NVTX range, a profiler, a lock around a
    shared compiler cache.

    **When.** Around the step's own code, inside `aitune_before_step` and `aitune_after_step`. Implementations must
    be wrappers, `@hookimpl(wrapper=True)`, and yield exactly once. The yield raises the step's error, if any: let
    it propagate, since the backend's state is only advanced when the step succeeds. The step's error propagates
    even if a wrapper swallows it; a wrapper that raises anything else disables its plugin, and the step runs
    without it. Wrappers nest in pluggy's order: `@hookimpl(wrapper=True, tryfirst=True)` outermost, `trylast=True`
    innermost, and otherwise the plugin registered last (plugins register in order of distribution name) outermost.

    ```python
    @hookimpl(wrapper=True)
    def aitune_wrap_step(step, backend):
        with torch.cuda.nvtx.range(f"aitune {step} {backend.name}"):
            return (yield)
    ```
    """
    raise NotImplementedError


@hookspec
def aitune_after_step(step: str, backend: Backend, duration_s: float, error: BaseException | None) -> None:
    """Observe a backend lifecycle step after it ran, successful or not.

    **Why.** Timing and failure reporting per backend, without wrapping.

    **When.** After every step that `aitune_before_step` saw, also when it failed. `duration_s` includes the
    wrappers; `error` is the exception the step raised, or `None`. The error still propagates afterwards; an
    observer cannot swallow it.

    ```python
    @hookimpl
    def aitune_after_step(step, backend, duration_s, error):
        metrics.record(f"aitune.{step}", duration_s, ok=error is None, backend=backend.name)
    ```
    """


@hookspec
def aitune_extend_converter(converter: cattrs.Converter) -> None:
    """Teach the cattrs converter a plugin's own types.

    **Why.** Backend configs and checkpoint manifests are written with one cattrs converter and nothing is pickled,
    so a config field of a type cattrs does not know (an enum from another library, a precision object) needs hooks.

    **When.** While the plugin loads (its backends' config types are checked against a converter it extended), and
    once per process when the converter is first used after plugins are loaded (the first backend key, config dump
    or checkpoint).

    ```python
    @hookimpl
    def aitune_extend_converter(converter):
        converter.register_unstructure_hook(Precision, lambda p: p.name)
        converter.register_structure_hook(Precision, lambda name, _: Precision[name])
    ```
    """


# --------------------------------------------------------------------------- where candidates run
@hookspec
def aitune_register_executors() -> Sequence[type[Executor]]:
    """Register executors: where candidates are built, validated and profiled.

    **Why.** Tuning runs each candidate in this process by default, or each in a child process (`"subprocess"`). A
    plugin can run them elsewhere, on a cluster, a job queue or a remote GPU, and users then choose it by name:
    `tune(..., executor="ray")` or `aitune_core.config.executor = "ray"`. The name is the class attribute
    `Executor.name`, under the rule backend names follow: the core's names (`auto`, `inprocess`, `subprocess`)
    cannot be taken, and two plugins registering one name are both refused.

    **When.** Once, while plugins are loaded, as `aitune_register_backends`. A class that is not a concrete
    `Executor` subclass with a valid name refuses the plugin, with the reason. Executors chosen by name are created
    with no arguments, so every option needs a default; users who want others pass an instance.

    **Returns** a sequence of `Executor` subclasses (not instances). Subclassing
    `aitune_core.executors.RemoteExecutor` leaves only shipping a graph and running one candidate to write; the
    summary rows, logs and restoring the winner come with it.

    ```python
    @hookimpl
    def aitune_register_executors():
        return [RayExecutor]
    ```
    """
    raise NotImplementedError


# --------------------------------------------------------------------------- where checkpoints deploy
@hookspec
def aitune_register_targets() -> Sequence[type[DeployTarget]]:
    """Register deploy targets: servers that a checkpoint's standalone artifacts are written for.

    **Why.** `aitune export CKPT --to NAME PATH` (or `ait.export`) writes a checkpoint for a server that runs it
    without aitune. Triton's model repository comes with the core; a plugin adds another server (OpenVINO Model
    Server, a company's own) under its name, the class attribute `DeployTarget.name`, by the rule backend names
    follow.

    **When.** Once, while plugins are loaded, as `aitune_register_backends`. A class that is not a concrete
    `DeployTarget` subclass with a valid name refuses the plugin.

    **Returns** a sequence of `DeployTarget` subclasses (not instances); a target writes one model in
    `write_model(model, folder)`, and its base class runs the rest.

    ```python
    @hookimpl
    def aitune_register_targets():
        return [ModelServerTarget]
    ```
    """
    raise NotImplementedError


# --------------------------------------------------------------------------- reference
def hook_specs() -> list[Callable[..., Any]]:
    """Every hook spec of this module, in the order they are defined."""
    module = sys.modules[__name__]
    marker = f"{PROJECT_NAME}_spec"
    return [value for name, value in vars(module).items() if name.startswith("aitune_") and hasattr(value, marker)]


if __name__ == "__main__":  # the reference page, docs/hooks.md, written by the module beside this one
    from aitune_core.plugins.hook_reference import main

    raise SystemExit(main(sys.modules[__name__]))
