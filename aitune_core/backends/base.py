"""The Backend base class: the lifecycle lives here, backends fill in the steps.

A backend subclass implements ``_build`` and ``_infer`` (and, where it holds
resources, ``_activate``, ``_deactivate`` and ``_deploy``). The public ``build``,
``activate``, ``deactivate`` and ``deploy`` methods enforce the state machine, run
plugin lifecycle hooks around each step and keep the bookkeeping, so no backend can
get those wrong.

Backends given by users are *blueprints*: strategies build copies made by
:meth:`Backend.blueprint`, never the instance the user passed.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
import torch

from aitune_core.backends.state import BackendState, next_state
from aitune_core.backends.tolerances import Tolerances
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.serialization import converter, stable_hash, structure_config

if TYPE_CHECKING:
    from aitune_core.backends.deployable import Deployable

B = TypeVar("B", bound="Backend")

UNSAFE_FIELD = "unsafe_options"
"""The config field that lifts option allow-lists; code may set it, stored data never."""


@attrs.define(frozen=True)
class BackendConfig:
    """Base class of backend configs: attrs classes, serialised with cattrs.

    A config is data with a schema: checkpoints rebuild it from their manifest, so every
    field is validated when it is made. ``unsafe_options=True`` lets code use free-form
    options that are not on their allow-list (:mod:`aitune_core.backends.safe_options`);
    it is never written to a checkpoint, and :meth:`Backend.from_dict` refuses data that
    sets it, so a checkpoint can never turn it on for itself.
    """

    unsafe_options: bool = attrs.field(default=False, kw_only=True, validator=attrs.validators.instance_of(bool))
    __aitune_code_only_fields__: ClassVar[tuple[str, ...]] = (UNSAFE_FIELD,)
    """Left out of data both ways by the converter (see ``serialization.CODE_ONLY_FIELDS``)."""


@attrs.frozen
class Availability:
    """Whether a backend can run here; ``reason`` says why not ("tensorrt not importable")."""

    available: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        return cls(True, "")

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@attrs.define(eq=False)
class BuildContext:
    """Everything a backend may use to build for one graph of one module.

    Fields are only ever added, so backends written against this class keep working.
    """

    module: torch.nn.Module
    module_name: str
    graph_spec: GraphSpec
    samples: list[Sample]
    device: torch.device
    cache_dir: Path
    signature: ForwardSignature
    trust_native_code: bool = False
    """Whether artifacts that are native code may be loaded into this process. Only a
    ``load(..., trust_native_code=True)`` sets it; a backend whose
    :meth:`Backend.optional_native_artifacts` it restored leaves them unread without it."""


class RefitError(RuntimeError):
    """A backend could not take the module's new weights in place; the caller rebuilds it or serves eager."""


@attrs.frozen
class NoDeployable:
    """Why a backend has no standalone artifact for :meth:`Backend.deployable`: it serves from Python."""

    reason: str


class Backend(abc.ABC):
    """An inference technology applied to one graph of one module.

    Class attributes a subclass sets:

    * ``name``: the stable registered name (``"eager"``, ``"inductor_jit"``);
    * ``config_class``: its attrs :class:`BackendConfig` subclass;
    * ``supported_devices``: device types it can run on.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[BackendConfig]] = BackendConfig
    supported_devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")

    def __init__(self, config: BackendConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = self.config_class(**overrides)
        else:
            if not isinstance(config, self.config_class):
                raise TypeError(
                    f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}"
                )
            if overrides:
                config = attrs.evolve(config, **overrides)
        self.config = config
        self._state = BackendState.INIT
        self.context: BuildContext | None = None
        self.build_info: dict[str, Any] = {}
        self.build_note: str = ""
        """One short line for this candidate's row in the tuning summary, set while building:
        how the build went where that is not what the config asked for (a fallback it took)."""

    # ------------------------------------------------------------------ identity
    @property
    def state(self) -> BackendState:
        return self._state

    @property
    def is_jit(self) -> bool:
        """JIT backends need the original module to activate; others can drop it."""
        return False

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        """Whether this backend can run on ``device`` in this environment."""
        device = torch.device(device)
        if device.type not in cls.supported_devices:
            return Availability.no(f"{cls.__name__} runs on {', '.join(cls.supported_devices)}, not {device.type}")
        return Availability.yes()

    def config_dict(self) -> dict[str, Any]:
        """The config as JSON-ready data, without ``unsafe_options``, which is never stored."""
        return converter().unstructure(self.config)

    def key(self) -> str:
        """A stable identifier of this backend and config, used for cache folders and lookup."""
        return f"{self.name or type(self).__name__}-{stable_hash(self.config_dict())}"

    def describe(self) -> str:
        """``ClassName(field=value,...)`` with the fields that differ from their defaults."""
        changed = []
        for field in attrs.fields(type(self.config)):
            value = getattr(self.config, field.name)
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if value != default:
                shown = str(value) if isinstance(value, torch.dtype) else repr(value)
                changed.append(f"{field.name}={shown}")
        return f"{type(self).__name__}({','.join(changed)})"

    def __repr__(self) -> str:
        return f"<{self.describe()} {self._state.name}>"

    def default_tolerances(self) -> Tolerances:
        """Tolerances this backend needs against eager; quantizing backends widen them."""
        return Tolerances()

    @property
    def lossy(self) -> bool:
        """Whether this config changes the numbers on purpose (quantization, reduced precision).

        Users who did not ask for different numbers must not get them, so a lossy
        default candidate is tried only when the user opts in: by naming it, with
        ``config.allow_lossy``, or by giving the strategy tolerances. Answer from the
        config alone, without building: the decision is made before anything is built.
        """
        return False

    def blueprint(self: B) -> B:
        """A fresh, unbuilt copy with the same config: what strategies build."""
        return type(self)(self.config)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """Serialisable state. ``Path`` values under ``"artifacts"`` are copied into checkpoints."""
        return {"config": self.config_dict(), "artifacts": self._artifacts(), "extra": self._extra_state()}

    @classmethod
    def from_dict(cls: type[B], data: dict[str, Any]) -> B:
        """Rebuild a backend from :meth:`to_dict` output; it starts CHECKPOINT_LOADED.

        The data may come from a checkpoint someone else wrote, so the config is
        structured strictly and always with ``unsafe_options=False``: options off their
        allow-list are refused here, naming the key.
        """
        config = data.get("config", {})
        if isinstance(config, dict) and UNSAFE_FIELD in config:
            raise ValueError(
                f"the stored config of {cls.__name__} sets {UNSAFE_FIELD}, which is only accepted in code and never "
                f"stored in checkpoints; remove it from the data, or build the backend in code with {UNSAFE_FIELD}=True"
            )
        backend = cls(structure_config(config, cls.config_class))
        backend._restore({name: Path(path) for name, path in data.get("artifacts", {}).items()}, data.get("extra", {}))
        backend._state = BackendState.CHECKPOINT_LOADED
        return backend

    def _artifacts(self) -> dict[str, Path]:
        """Files this backend needs after a restart (compiled packages, engines, weights)."""
        return {}

    def native_artifacts(self) -> frozenset[str]:
        """Names of artifacts that are machine code the process loads when deploying them.

        A checkpoint holding such files runs their code on load (a shared library's
        constructors, an engine's plugins), so ``load`` refuses them unless the user
        passes ``trust_native_code=True``. Loading asks the installed backend class, not
        the manifest, so a checkpoint cannot hide native code by editing its own marks.
        It is called on backends restored with :meth:`from_dict`, before deploying.
        """
        return frozenset()

    def optional_native_artifacts(self) -> frozenset[str]:
        """Those of :meth:`native_artifacts` the backend can do without: a cache of what it can make again.

        ``load`` does not refuse a checkpoint for them. The backend reads them only when
        its context has ``trust_native_code``; without it, it leaves them unread and does
        the work they would have saved (a JIT backend compiles again), and says so.
        """
        return frozenset()

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        """Take back what :meth:`_artifacts` and :meth:`_extra_state` gave."""

    def check_target(self, module: torch.nn.Module) -> None:
        """Raise ValueError when this backend, restored by :meth:`from_dict`, cannot serve ``module``.

        ``load`` asks every restored backend before it changes anything, so a backend
        whose stored state names parts of the module (a partition names submodules)
        refuses a model built another way while the model is still untouched. Most
        backends hold nothing of the kind and accept any module.
        """

    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """The standalone artifact serving ``graph``, for deploy targets (:mod:`aitune_core.backends.deployable`)."""
        kind = "serves from the module's own Python code" if self.is_jit else "has no standalone file"
        return NoDeployable(f"{self.describe()} {kind}")

    # ------------------------------------------------------------------ lifecycle
    def _transition(self, step: str, action: Callable[[], None]) -> None:
        target = next_state(self.describe(), step, self._state)
        slots().run_step(step, self, action)
        self._state = target

    def declines(self, context: BuildContext) -> str | None:
        """Why this backend will not take the graph of ``context``, when it can tell before building; else None.

        A graph it cannot compile (a forward that decides in Python on its data, for an
        exporter) is then skipped with the reason, at the cost of a check rather than
        of a failed export or compile; with ``tune(..., partition=True)`` its
        submodules are tried instead.
        """
        return None

    def build(self: B, context: BuildContext) -> B:
        """Build for one graph. Allowed once, from INIT; leaves the backend ACTIVE."""
        next_state(self.describe(), "build", self._state)
        self.context = context

        def action() -> None:
            self._build(context)

        try:
            self._transition("build", action)
        except BaseException:
            self.context = None
            raise
        return self

    def activate(self, context: BuildContext | None = None) -> None:
        """Make an INACTIVE or CHECKPOINT_LOADED backend ready for inference again."""
        if context is not None:
            self.context = context
        self._transition("activate", self._activate)

    def deactivate(self) -> None:
        """Release what the backend holds for inference; it can be activated again."""
        self._transition("deactivate", self._deactivate)

    def deploy(self, context: BuildContext | None = None) -> None:
        """Finalise for serving; no state change is allowed afterwards."""
        if context is not None:
            self.context = context
        self._transition("deploy", self._deploy)

    def can_refit(self) -> bool:
        """Whether :meth:`refit` can take new weights without a rebuild; decided without doing work."""
        return False

    def refit(self, module: torch.nn.Module) -> None:
        """Take the weights of ``module`` (the one it was built for, new values) into what serves.

        The caller keeps the route on eager and validates against eager before it serves
        again, so a backend may change what it holds in place."""
        if not self.can_refit():
            raise RefitError(f"{self.describe()} cannot take new weights without a rebuild")
        self._transition("refit", lambda: self._refit(module))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._state is not BackendState.ACTIVE and self._state is not BackendState.DEPLOYED:
            raise RuntimeError(f"{self.describe()} is {self._state.name}; only ACTIVE or DEPLOYED backends run")
        return self._infer(*args, **kwargs)

    def inference_callable(self) -> Callable[..., Any]:
        """What routes call while the backend is ACTIVE or DEPLOYED: :meth:`_infer`, or a shorter way to its result.

        It skips :meth:`__call__`'s state check; a route takes it again whenever it is activated.
        """
        return self._infer

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def _build(self, context: BuildContext) -> None:
        """Build what inference needs from ``context`` (module, graph spec, samples, device)."""

    @abc.abstractmethod
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        """Run a call, given exactly as the wrapped module was called."""

    def _refit(self, module: torch.nn.Module) -> None:
        """Copy ``module``'s parameters and buffers into what serves; raise RefitError when it cannot."""
        raise RefitError(f"{self.describe()} has no refit")  # pragma: no cover - can_refit said yes

    def _activate(self) -> None:
        """Reload or re-create what :meth:`_deactivate` released."""

    def _deactivate(self) -> None:
        """Release runtime resources (compiled code, device memory)."""

    def _deploy(self) -> None:
        """Finalise for serving; from CHECKPOINT_LOADED, load artifacts here."""
        if self._state is BackendState.CHECKPOINT_LOADED:
            self._activate()
