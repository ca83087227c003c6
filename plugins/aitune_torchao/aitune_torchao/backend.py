"""TorchAOBackend: a torchao-quantized copy of the module, optionally under ``torch.compile``.

Lifecycle:

* build: quantize a deep copy (never the user's module), optionally compile it, and
  measure the quantization error on the recorded samples (``build_info``);
* deactivate: drop the quantized copy and the compiled code;
* activate: load the stored quantized weights when there are some (after a checkpoint,
  or once the weights were written), else quantize the module again;
* checkpoint: the quantized state dict is the artifact, so deploying rebuilds the
  quantized module from it (the architecture comes from the freshly built model given
  to ``aitune_core.load``) and never quantizes the original weights again;
* refit: the module's new weights are quantized module by module and copied into the
  served copy in place (:mod:`aitune_torchao.refit`); the stored weights are written
  again when a checkpoint next asks for them.

The quantized weights are written lazily, when a checkpoint asks for the artifact:
most candidates lose and are released, and writing their weights would cost disk
time for nothing.
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aitune_core.plugin_api import (
    DEFAULT_TOLERANCES,
    Availability,
    Backend,
    BuildContext,
    RefitError,
    Tolerance,
    Tolerances,
)
from aitune_torchao import refit
from aitune_torchao.config import TorchAOBackendConfig, render_ao_config
from aitune_torchao.filters import ModuleFilter
from aitune_torchao.presets import get_preset
from aitune_torchao.quantize import RestoreMode, quantized_copy, rebuild
from aitune_torchao.serialization import WEIGHTS_FILE, load_state, save_state

MIN_TORCHAO = (0, 18)
"""The presets name torchao 0.18's config classes (its "version 2" tensor subclasses)."""

EXPLICIT_TOLERANCE = (5e-2, 5e-2)
"""Starting tolerances (atol, rtol) for an explicit torchao config, as for the int8 presets."""

ERROR_SAMPLES = 2
"""How many recorded samples the build-time error measurement runs on."""


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def torchao_availability() -> Availability:
    """Whether a recent enough torchao is installed (its metadata only; nothing is imported)."""
    try:
        version = importlib.metadata.version("torchao")
    except importlib.metadata.PackageNotFoundError:
        return Availability.no("torchao is not installed; pip install torchao")
    if _version_tuple(version) < MIN_TORCHAO:
        wanted = ".".join(map(str, MIN_TORCHAO))
        return Availability.no(f"torchao {version} is installed; aitune-torchao needs torchao>={wanted}")
    return Availability.yes()


class _ConfiguredAvailability:
    """``availability(device)`` that knows the preset when asked on an instance.

    On the class (as the plugin registry asks) it answers whether torchao can run on the
    device at all; on an instance (as strategies ask their blueprints) it also checks the
    configured preset's hardware, so ``TorchAOBackend(preset="fp8dq")`` is skipped on a
    CPU, or on a GPU older than compute capability 8.9, with that reason.
    """

    def __get__(
        self, instance: TorchAOBackend | None, owner: type[TorchAOBackend]
    ) -> Callable[[torch.device | str], Availability]:
        def availability(device: torch.device | str) -> Availability:
            device = torch.device(device)
            if device.type not in owner.supported_devices:
                devices = ", ".join(owner.supported_devices)
                return Availability.no(f"{owner.__name__} runs on {devices}, not {device.type}")
            installed = torchao_availability()
            if not installed.available:
                return installed
            if device.type == "cuda" and not torch.cuda.is_available():
                return Availability.no("no CUDA device")
            if instance is not None and instance.config.preset is not None:
                return get_preset(instance.config.preset).availability(device)
            return Availability.yes()

        return availability


class TorchAOBackend(Backend):
    """torchao quantization of one graph's module: a preset or an explicit torchao config."""

    name = "torchao"
    config_class = TorchAOBackendConfig
    supported_devices = ("cpu", "cuda")
    availability = _ConfiguredAvailability()  # type: ignore[assignment, unused-ignore]
    config: TorchAOBackendConfig

    def __init__(self, config: TorchAOBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._module: torch.nn.Module | None = None
        self._runner: Callable[..., Any] | None = None
        self._weights: Path | None = None
        self._quantized: list[str] = []
        self._restore_mode: RestoreMode = "swap"

    # ------------------------------------------------------------------ identity
    @property
    def is_jit(self) -> bool:
        """False: the stored quantized weights carry everything but the architecture."""
        return False

    @property
    def lossy(self) -> bool:
        """Always: every preset and torchao config quantizes, weight-only ones included."""
        return True

    def describe(self) -> str:
        """``TorchAOBackend(preset='int8wo')``, then the other fields that differ from the defaults."""
        config = self.config
        if config.preset is not None:
            parts = [f"preset={config.preset!r}"]
        else:
            assert config.ao_config is not None
            parts = [f"ao_config={render_ao_config(config.ao_config)}"]
        if config.modules != ModuleFilter():
            parts.append(f"modules={config.modules.describe()}")
        if config.compile:
            parts.append("compile=True")
        if config.compile_mode is not None:
            parts.append(f"compile_mode={config.compile_mode!r}")
        for name in ("atol", "rtol"):
            value = getattr(config, name)
            if value is not None:
                parts.append(f"{name}={value:g}")
        return f"{type(self).__name__}({','.join(parts)})"

    def default_tolerances(self) -> Tolerances:
        """The preset's tolerances (never tighter than aitune's per-dtype defaults), or the config's own.

        ``atol``/``rtol`` set in the config are taken as given, for every floating dtype,
        so a user can also tighten them.
        """
        config = self.config
        atol, rtol = (
            (get_preset(config.preset).atol, get_preset(config.preset).rtol) if config.preset else EXPLICIT_TOLERANCE
        )
        by_dtype = {}
        for dtype, default in DEFAULT_TOLERANCES.items():
            by_dtype[dtype] = Tolerance(
                config.atol if config.atol is not None else max(atol, default.atol),
                config.rtol if config.rtol is not None else max(rtol, default.rtol),
            )
        return Tolerances(by_dtype)

    # ------------------------------------------------------------------ persistence
    def _artifacts(self) -> dict[str, Path]:
        if self._weights is None and self.context is not None:
            if self._module is None:
                self._module = self._quantize(self.context).module
            self._weights = save_state(self._module, self.context.cache_dir / WEIGHTS_FILE)
        return {"weights": self._weights} if self._weights is not None else {}

    def _extra_state(self) -> dict[str, Any]:
        return {"quantized_modules": list(self._quantized), "restore": self._restore_mode}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self._weights = artifacts.get("weights")
        self._quantized = [str(name) for name in extra.get("quantized_modules", [])]
        restore = extra.get("restore", "swap")
        if restore not in ("swap", "quantize"):
            raise ValueError(f"unknown restore mode {restore!r} in a stored {type(self).__name__}")
        self._restore_mode = restore

    # ------------------------------------------------------------------ lifecycle
    def _build(self, context: BuildContext) -> None:
        result = self._quantize(context)
        self._module = result.module
        self._runner = self._runner_for(result.module)
        start = time.perf_counter()
        abs_error, rel_error = self._sample_error(context)
        self.build_info = {
            "recipe": self.config.recipe,
            "torchao": importlib.metadata.version("torchao"),
            "quantized_modules": len(result.quantized),
            "quantize_s": round(result.seconds, 4),
            "quant_max_abs_error": abs_error,
            "quant_max_rel_error": rel_error,
            "error_check_s": round(time.perf_counter() - start, 4),
        }

    def _quantize(self, context: BuildContext) -> Any:
        result = quantized_copy(context.module, self.config)
        self._quantized, self._restore_mode = result.quantized, result.restore
        return result

    def _activate(self) -> None:
        if self.context is None:
            raise RuntimeError(
                f"{self.describe()} needs the module's architecture to activate: pass the BuildContext of the "
                "freshly built model"
            )
        if self._weights is not None:
            state = load_state(self._weights, map_location=self.context.device)
            module = rebuild(self.context.module, self.config, state, self._restore_mode, self._quantized)
        else:
            module = self._quantize(self.context).module
        self._module = module
        self._runner = self._runner_for(module)

    def _deactivate(self) -> None:
        self._module = None
        self._runner = None

    # ------------------------------------------------------------------ new weights
    @property
    def refit_refusal(self) -> str:
        """Why :meth:`refit` cannot take new weights (empty when it can)."""
        return refit.refit_blocker(self.config, self._restore_mode)

    def can_refit(self) -> bool:
        return not self.refit_refusal

    def _refit(self, module: torch.nn.Module) -> None:
        if self._module is None:
            raise RefitError(f"{self.describe()} holds no quantized copy to take new weights")
        start = time.perf_counter()
        written = refit.take_weights(self._module, module, self.config, self._quantized)
        self._weights = None  # the stored quantized weights are the old ones; a checkpoint writes them again
        self.build_info["last_refit"] = {"tensors": written, "s": round(time.perf_counter() - start, 4)}

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._runner is not None
        return self._runner(*args, **kwargs)

    def inference_callable(self) -> Callable[..., Any]:
        return self._runner if self._runner is not None else self._infer

    # ------------------------------------------------------------------ helpers
    def _runner_for(self, module: torch.nn.Module) -> Callable[..., Any]:
        if not self.config.compile:
            return module
        return torch.compile(module, mode=self.config.compile_mode)

    def _sample_error(self, context: BuildContext) -> tuple[float, float]:
        """Max abs/rel error against the original module on the first recorded samples.

        Running them here also compiles (with ``compile``), so a compile failure is a
        build failure rather than a validation one.
        """
        from aitune_core.plugin_api import as_call, compare_outputs

        assert self._runner is not None
        abs_error = rel_error = 0.0
        with torch.no_grad():
            for index, sample in enumerate(context.samples[:ERROR_SAMPLES]):
                call = as_call(f"sample {index}", sample.arguments, context.signature, context.device)
                expected = context.module(*call.args, **call.kwargs)
                actual = self._runner(*call.args, **call.kwargs)
                comparison = compare_outputs(actual, expected, self.default_tolerances())
                abs_error = max(abs_error, comparison.max_abs_error)
                rel_error = max(rel_error, comparison.max_rel_error)
        return float(f"{abs_error:.4g}"), float(f"{rel_error:.4g}")
