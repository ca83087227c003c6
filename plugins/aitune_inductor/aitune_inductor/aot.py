"""TorchInductorAotBackend: ``torch.export`` + AOT Inductor, compiled once into a ``.pt2`` package.

The package is the artifact: a checkpoint carries it, and loading it elsewhere needs
neither the model's Python code nor a compiler, and compiles nothing. Shapes are fixed
at export time, so the graph's ranges become ``torch.export`` dims (see :mod:`.dims`).

The package does not check the upper bounds of its dims when it runs; aitune's routing
sends calls outside the tuned range to eager before they reach the backend. Nor does
it check strides: a package exported from contiguous inputs reads a non-contiguous
input (a slice of a larger tensor) as if it were contiguous and returns wrong numbers
without an error. Packages are therefore always exported from contiguous inputs, and
calls get contiguous tensors (a no-op for the usual, contiguous, input).

The package reads its weights from the module's own tensors wherever torch allows it
(see :mod:`.aot_weights`): the model stays in memory once, and new weights are taken
without compiling again (:meth:`TorchInductorAotBackend.refit`). Such a package holds
no weights, so it serves only beside the module (a checkpoint stores the module's
weights with it); a server running the file alone needs one compiled with
``weights_in_package=True``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, cast

import attrs
import torch

from aitune_core.plugin_api import (
    Availability,
    Backend,
    BackendConfig,
    BuildContext,
    GraphSpec,
    RefitError,
    data_dependent_reason,
    get_logger,
)
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_inductor import aot_weights
from aitune_inductor.aot_weights import PackageWeights, ServedWeights
from aitune_inductor.availability import inductor_availability
from aitune_inductor.call_layout import CallLayout
from aitune_inductor.calls import build_calls
from aitune_inductor.config_checks import check_allowed_options, check_options, options_dict
from aitune_inductor.deployable import aot_deployable
from aitune_inductor.dims import describe_dims, export_example, export_shapes
from aitune_inductor.package_safety import unpack_package

MIN_TORCH = "2.6"
PACKAGE_ARTIFACT = "package"
PACKAGE_FILE = "inductor-aot.pt2"


@attrs.frozen
class TorchInductorAotBackendConfig(BackendConfig):
    """How the graph is exported and compiled.

    strict: ``torch.export`` strict mode (trace with Dynamo) instead of the default
        non-strict tracing through Python.
    inductor_configs: Inductor options for the AOT compile (``torch._inductor.list_options()``);
        only those on :data:`aitune_inductor.config_checks.INDUCTOR_OPTION_RULES` unless the
        config is made with ``unsafe_options=True`` (never stored in checkpoints).
    weights_in_package: compile the weights into the package, so that the file runs without
        the module (a server loading it alone). It then holds a copy of the weights of its
        own, one more model size in memory, and takes new ones by copying them in. By
        default the package reads the module's tensors (see :mod:`aitune_inductor.aot_weights`).
    """

    strict: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    inductor_configs: dict[str, Any] | None = attrs.field(
        default=None, converter=options_dict, validator=[check_options, check_allowed_options]
    )
    weights_in_package: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


def _torch_too_old() -> str | None:
    from torch.torch_version import TorchVersion

    if TorchVersion(torch.__version__) < MIN_TORCH:
        return f"AOT Inductor packages need torch >= {MIN_TORCH}, found {torch.__version__}"
    return None


class TorchInductorAotBackend(Backend):
    """The graph exported with its dims, compiled by AOT Inductor and run from the loaded package."""

    name = "inductor_aot"
    config_class = TorchInductorAotBackendConfig
    supported_devices = ("cpu", "cuda")

    def __init__(self, config: TorchInductorAotBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._package: Path | None = None
        self._layout: CallLayout | None = None
        self._model: Any = None
        self._weights: PackageWeights | None = None
        self._served = ServedWeights()

    @property
    def is_jit(self) -> bool:
        return False

    @property
    def package_path(self) -> Path | None:
        return self._package

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        base = super().availability(device)
        if not base.available:
            return base
        too_old = _torch_too_old()
        if too_old is not None:
            return Availability.no(too_old)
        return inductor_availability(torch.device(device), needs_cpp_on_cuda=True)

    # ------------------------------------------------------------------ building
    def declines(self, context: BuildContext) -> str | None:
        """torch.export carries data-dependent sizes, not Python decisions on the data: such graphs are declined."""
        return data_dependent_reason(context, symbolic_sizes=True)

    def _build(self, context: BuildContext) -> None:
        config = cast(TorchInductorAotBackendConfig, self.config)
        calls = build_calls(context)
        started = time.perf_counter()
        try:
            program, args, kwargs = self._export(context, export_example(calls[0][1], context.graph_spec))
        except Exception:
            program, args, kwargs = self._export(context, calls[0][1])
        exported = time.perf_counter()
        used, others = aot_weights.graph_tensors(program)
        weightless = not config.weights_in_package and others == 0 and aot_weights.can_read_module_weights()
        options = aot_weights.compile_options(config.inductor_configs, weightless)
        package = self._compile(program, context, options)
        compiled = time.perf_counter()
        self._package = package
        self._layout = CallLayout.of_call(context.signature, args, kwargs)
        self._weights = None
        try:
            self._load(serve=False)
            try:
                self._weights = self._read_weights(context, used, others, options)
            except aot_weights.WeightlessMismatch as error:
                if not weightless:
                    raise
                # The module lacks a constant the package reads: keep the weights inside it instead.
                self.build_note = f"weights kept in the package: {error}"
                options = {**options, **{key: True for key in aot_weights.WEIGHTLESS}}
                self._release_model()
                package = self._compile(program, context, options)
                compiled = time.perf_counter()
                self._load(serve=False)
                self._weights = self._read_weights(context, used, others, options)
            self._serve_weights()
            for _, arguments in calls:
                call_args, call_kwargs = context.signature.bind(arguments)
                self._infer(*call_args, **call_kwargs)
        except BaseException:
            self._release_model()  # a failed build stays INIT, which deactivate() cannot reach
            raise
        self.build_info = {
            "export_s": round(exported - started, 3),
            "compile_s": round(compiled - exported, 3),
            "package": str(package),
            "package_bytes": package.stat().st_size,
            "dims": describe_dims(context.graph_spec),
            "weights": "in the package" if self._weights.in_package else "read from the module",
            "refit": self._weights.refit_blocker or "yes",
        }

    def _compile(self, program: Any, context: BuildContext, options: dict[str, Any]) -> Path:
        import torch._inductor

        context.cache_dir.mkdir(parents=True, exist_ok=True)
        # Compiled under a unique name and moved into place in one step, so a reader never
        # sees half a package. Loaded packages live in memory: replacing the file is safe.
        package = context.cache_dir / PACKAGE_FILE
        building = context.cache_dir / f"building-{uuid.uuid4().hex}.pt2"
        try:
            torch._inductor.aoti_compile_and_package(program, package_path=str(building), inductor_configs=options)
            os.replace(building, package)
        finally:
            building.unlink(missing_ok=True)
        return package

    def _read_weights(
        self, context: BuildContext, used: set[str], others: int, options: dict[str, Any]
    ) -> PackageWeights:
        in_package = options.get(next(iter(aot_weights.WEIGHTLESS)), True) is not False
        fqns = self._model.get_constant_fqns()
        weights = aot_weights.package_weights(
            fqns, aot_weights.module_tensors(context.module), used, others, in_package
        )
        if weights.refit_blocker:
            log = get_logger(module=context.module_name, graph=context.graph_spec.name)
            log.info("package takes no new weights in place", backend=self.describe(), reason=weights.refit_blocker)
        return weights

    def _export(self, context: BuildContext, example: dict[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        config = cast(TorchInductorAotBackendConfig, self.config)
        example = {name: contiguous(value) for name, value in example.items()}
        args, kwargs = context.signature.bind(example)
        with torch.no_grad():
            program = torch.export.export(
                context.module,
                args,
                kwargs,
                dynamic_shapes=export_shapes(example, context.graph_spec),
                strict=config.strict,
            )
        return program, args, kwargs

    def _load(self, serve: bool = True) -> None:
        """Load the package; this never compiles (the .so inside is used as it is).

        serve: point a package without weights at the module's tensors (a build first
        describes them, with ``serve=False``).
        """

        if self._package is None:
            raise RuntimeError(f"{self.describe()} has no package to load; build it or restore it from a checkpoint")
        if not self._package.is_file():
            raise FileNotFoundError(f"{self.describe()}: package {self._package} does not exist")
        device = self.context.device if self.context is not None else None
        index = device.index if device is not None and device.type == "cuda" and device.index is not None else -1
        scratch = self.context.cache_dir if self.context is not None else None
        self._release_model()  # a reload unpacks afresh; the previous copy goes now
        self._model = load_package(self._package, index, scratch)
        if not serve:
            return
        try:
            if aot_weights.reads_module_weights(self._model) and (self._weights is None or self._weights.in_package):
                raise RuntimeError(
                    f"{self.describe()}: the package reads its weights from the module, but its stored state does "
                    "not say which; it cannot run without them (build it again)"
                )
            if self._weights is not None:
                self._serve_weights()
        except BaseException:
            self._release_model()
            raise

    def _serve_weights(self) -> None:
        """Point a package compiled without weights at the module's tensors."""
        weights = self._weights
        if weights is None or weights.in_package:
            return
        if self.context is None:
            raise RuntimeError(
                f"{self.describe()} reads its weights from the module: activate or deploy it with the BuildContext "
                "of the model it serves"
            )
        self._served.bind(self._model, self._checked_tensors(self.context.module))

    def _checked_tensors(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        assert self._weights is not None and self.context is not None
        return aot_weights.checked_tensors(module, self._weights, self.context.device)

    # ------------------------------------------------------------------ persistence
    def _artifacts(self) -> dict[str, Path]:
        return {PACKAGE_ARTIFACT: self._package} if self._package is not None else {}

    def _extra_state(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"layout": self._layout.to_dict()} if self._layout is not None else {}
        if self._weights is not None:
            extra["weights"] = self._weights.to_dict()
        return extra

    def native_artifacts(self) -> frozenset[str]:
        """The package holds a shared library whose constructors run as soon as it is loaded."""
        return frozenset({PACKAGE_ARTIFACT})

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        if PACKAGE_ARTIFACT not in artifacts:
            raise ValueError(f"{type(self).__name__} checkpoint data has no {PACKAGE_ARTIFACT!r} artifact")
        self._package = Path(artifacts[PACKAGE_ARTIFACT])
        layout = extra.get("layout")
        self._layout = CallLayout.from_dict(layout) if layout else None
        weights = extra.get("weights")
        self._weights = PackageWeights.from_dict(weights) if weights is not None else None

    # ------------------------------------------------------------------ deploying
    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """The package, for deploy targets, where it holds its weights (see :mod:`aitune_inductor.deployable`)."""
        return aot_deployable(self.describe(), self._package, self._layout, self._weights, graph)

    # ------------------------------------------------------------------ new weights
    @property
    def refit_refusal(self) -> str:
        """Why :meth:`refit` cannot take new weights (empty when it can)."""
        if self._weights is None:
            return "the package's weights were not described when it was stored (an older aitune-inductor)"
        return self._weights.refit_blocker

    def can_refit(self) -> bool:
        return self._weights is not None and not self._weights.refit_blocker

    def _refit(self, module: torch.nn.Module) -> None:
        """Point the package at the module's tensors again, or copy them in when it holds its own.

        Weights written in place are what a package without weights reads already; only
        tensors the module replaced are handed over again.
        """
        if self._model is None or self._weights is None:
            raise RefitError(f"{self.describe()} has no loaded package to take new weights")
        tensors = self._checked_tensors(module)
        started = time.perf_counter()
        if self._weights.in_package:
            aot_weights.copy_into_package(self._model, tensors)
            taken = len(tensors)
        else:
            taken = self._served.bind(self._model, tensors)
        self.build_info["last_refit"] = {"tensors": taken, "s": round(time.perf_counter() - started, 4)}

    # ------------------------------------------------------------------ lifecycle
    def _activate(self) -> None:
        self._load()

    def _deactivate(self) -> None:
        self._release_model()

    def _release_model(self) -> None:
        """Free the loaded package: its weights (one model size), its library and its unpacked folder.

        The runner is closed, not only forgotten, so that all of it goes at once even
        while something else (a traceback, a profiler) still holds the runner. The
        exported program is never kept past the build.
        """
        model, self._model = self._model, None
        close = getattr(model, "close", None)
        if callable(close):
            close()
        del model
        self._served.release()  # the module's memory the package read: held no longer than the package

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        layout = self._layout
        if layout is not None and not layout.matches(args, kwargs):
            args, kwargs = layout.arrange(args, kwargs)
        if not _all_contiguous(args) or not _all_contiguous(kwargs.values()):
            args, kwargs = contiguous(args), contiguous(kwargs)
        return self._model(*args, **kwargs)


def load_package(path: Path, device_index: int, scratch: Path | None = None) -> Any:
    """Load a ``.pt2`` package without torch's device-information check, and never from ``path`` itself.

    A package may come from a checkpoint, and torch's loader extracts members under
    whatever names they carry, so the package is first checked and unpacked by
    :mod:`.package_safety` into a private folder under ``scratch`` (the temp folder
    when None); torch loads only that folder, or a clean copy of the package written
    there. Refused packages raise ValueError naming the member.

    ``aoti_load_package`` first works out this machine's CPU instruction set, only to
    warn when it differs from the package's; doing so compiles half a dozen probe
    programs into the Inductor cache (about 9 s on two cores, on every machine or
    container whose cache is new), and its module imports Dynamo (over a second). The
    package loader underneath is used directly, run by :class:`PackageRunner`; the
    public function remains the fallback for a torch without that loader.
    """
    package = unpack_package(path, scratch)
    try:
        loader = _folder_loader(package.tree, device_index)
        if loader is not None:
            return PackageRunner(loader, keep_alive=package)
        try:
            return _archive_loader(package.clean_copy(), device_index)
        finally:
            package.remove()  # torch extracted the clean copy into a folder of its own
    except BaseException:
        package.remove()
        raise


def _folder_loader(tree: Path, device_index: int) -> Any:
    """torch's loader reading the unpacked folder, or None for a torch whose loader reads only zip files."""
    try:
        return torch._C._aoti.AOTIModelPackageLoader(str(tree), "model", False, 1, device_index)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None  # a real problem with the package shows again, with torch's own message, from the zip


def _archive_loader(archive: Path, device_index: int) -> Any:
    try:
        return PackageRunner(torch._C._aoti.AOTIModelPackageLoader(str(archive), "model", False, 1, device_index))
    except (AttributeError, TypeError, ValueError):
        from torch._inductor import aoti_load_package

        return aoti_load_package(str(archive), device_index=device_index)


class PackageRunner:
    """Runs a loaded package: tensors flattened in the order exported, outputs rebuilt.

    The call's input and output tree specs are parsed once, at load, rather than on
    every call. ``keep_alive`` is what the loader still reads from (the unpacked
    folder, where CUDA kernels are loaded on first use); it goes with the runner. A
    package compiled to read its weights from the module runs only once it was given
    them (:meth:`load_constants`); before, it would read memory it was never given.
    """

    def __init__(self, loader: Any, keep_alive: object = None) -> None:
        import torch.utils._pytree as pytree

        in_spec, out_spec = loader.get_call_spec()
        self._loader = loader
        self._keep_alive = keep_alive
        self._in_spec = pytree.treespec_loads(in_spec)
        self._out_spec = pytree.treespec_loads(out_spec)
        self._unready = aot_weights.reads_module_weights(loader)

    def close(self) -> None:
        """Free the loaded package now, rather than whenever the last reference to this runner goes."""
        self._loader = None
        keep_alive, self._keep_alive = self._keep_alive, None
        remove = getattr(keep_alive, "remove", None)
        if callable(remove):
            remove()

    def get_metadata(self) -> dict[str, str]:
        """What the package was compiled with (its device, and metadata given at compile time)."""
        return dict(self._live().get_metadata())

    def get_constant_fqns(self) -> list[str]:
        """The names (in the module's ``state_dict``) of the tensors the package reads as constants."""
        return list(self._live().get_constant_fqns())

    def load_constants(
        self, constants: dict[str, torch.Tensor], *, check_full_update: bool, user_managed: bool = False
    ) -> None:
        """Give the package constants by name: copied in, or read in place when ``user_managed``."""
        self._live().load_constants(constants, False, check_full_update, user_managed)
        self._unready = False

    def _live(self) -> Any:
        if self._loader is None:
            raise RuntimeError("this package was released; activate its backend again to run it")
        return self._loader

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch.utils._pytree as pytree
        from torch.export._tree_utils import reorder_kwargs

        if self._unready or self._loader is None:
            if self._loader is None:
                raise RuntimeError("this package was released; activate its backend again to run it")
            raise RuntimeError("this package reads its weights from the module and was given none (load_constants)")
        leaves = pytree.tree_leaves((args, reorder_kwargs(kwargs, self._in_spec)))
        flat = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        return pytree.tree_unflatten(self._loader.boxed_run(flat), self._out_spec)


def contiguous(value: Any) -> Any:
    """``value`` with every tensor in it contiguous (the layout packages are exported with)."""
    import torch.utils._pytree as pytree

    return pytree.tree_map_only(torch.Tensor, lambda tensor: tensor.contiguous(), value)


def _all_contiguous(values: Any) -> bool:
    """A cheap check of the top level; anything that is not a plain tensor takes the full walk."""
    for value in values:
        if isinstance(value, torch.Tensor):
            if not value.is_contiguous():
                return False
        elif isinstance(value, (list, tuple, dict)):
            return False
    return True
