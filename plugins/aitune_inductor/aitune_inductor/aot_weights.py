"""The AOT package's weights: read from the module's own tensors, and taken again after new weights.

A package compiled with its weights inside holds a second copy of the model, and once
loaded a third (the loader copies them out of the shared library). Compiled without
them (``aot_inductor.package_constants_in_so=False``) it reads each parameter and
buffer from the module itself: torch's loader takes "user-managed" constants, tensors
it reads in place. The model is then in memory once, weights written in place
(``load_state_dict``, an optimizer step) reach the package with no work, and a refit
only points the package again at tensors the module replaced.

Two facts about torch's loader (2.13) shape how the tensors are handed over:

* it keeps a reference to each user-managed tensor that it never drops, so handing it
  the module's tensors would keep them alive for the rest of the process. It is given
  views without ownership over the same memory instead, and :class:`ServedWeights`
  holds the memory (the storages) itself while the package is loaded;
* it checks neither the shape, dtype nor strides of a tensor it is given, and would
  read one of another layout wrongly. Each tensor is checked here against what the
  package was compiled for (:class:`ConstantSpec`, recorded at build).

What the package computed from the weights itself cannot come from the module: Inductor
inlines small 1-D tensors into its kernels (unless ``always_keep_tensor_constants``,
which the backend sets) and ``freezing`` folds weights into new constants. Which ones
the package reads is compared with which ones the graph uses (:func:`package_weights`),
and a package that derived any is served, but not refitted, and says why.

A graph holding tensors that are neither parameters nor buffers (a tensor attribute,
``torch.tensor(...)`` in ``forward``) keeps its weights inside the package, whose
constants the module has no values for; a refit then copies the new weights into the
package's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import cattrs
import torch

from aitune_core.plugin_api import RefitError, dtype_from_str

WEIGHTLESS = {"aot_inductor.package_constants_in_so": False}
"""The compile option of a package that reads its weights from the module."""

READS_MODULE = ("aitune_weights", "module")
"""The metadata entry such a package carries, so that it is never run without its weights given."""

KEEP_CONSTANTS = {"always_keep_tensor_constants": True}
"""Keep every weight a constant the package reads, never a number inlined into a kernel."""

USER_WEIGHT_OPTIONS = (
    "freezing",
    "aot_inductor.use_runtime_constant_folding",
    "aot_inductor.package_constants_in_so",
    "aot_inductor.package_constants_on_disk_format",
    "always_keep_tensor_constants",
)
"""Options that decide how the package holds its weights: given by the user, the package keeps them inside."""


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _specs(value: Iterable[ConstantSpec]) -> tuple[ConstantSpec, ...]:
    return tuple(value)


def _tuple_of_ints(_instance: Any, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    if not all(isinstance(size, int) and not isinstance(size, bool) for size in value):
        raise ValueError(f"{attribute.name} must be whole numbers, got {value!r}")


def _dtype_name(_instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    dtype_from_str(value)


@attrs.frozen
class ConstantSpec:
    """A module tensor the package reads (by its name in ``state_dict``), as the package was compiled for it."""

    fqn: str = attrs.field(validator=attrs.validators.instance_of(str))
    shape: tuple[int, ...] = attrs.field(converter=_ints, validator=_tuple_of_ints)
    stride: tuple[int, ...] = attrs.field(converter=_ints, validator=_tuple_of_ints)
    dtype: str = attrs.field(validator=[attrs.validators.instance_of(str), _dtype_name])

    @classmethod
    def of(cls, fqn: str, tensor: torch.Tensor) -> ConstantSpec:
        return cls(fqn, tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype))

    def mismatch(self, tensor: torch.Tensor, device: torch.device) -> str | None:
        """What keeps ``tensor`` from standing in for this constant, or None."""
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided:
            return f"{self.fqn} is a {type(tensor).__name__} ({tensor.layout}), not a plain dense tensor"
        if tensor.device.type != device.type or device.index not in (None, tensor.device.index):
            return f"{self.fqn} is on {tensor.device}, the package on {device}"
        if str(tensor.dtype) != self.dtype:
            return f"{self.fqn} is {tensor.dtype}, the package was compiled for {self.dtype}"
        if tuple(tensor.shape) != self.shape:
            return f"{self.fqn} has shape {tuple(tensor.shape)}, the package was compiled for {self.shape}"
        if tuple(tensor.stride()) != self.stride:
            return f"{self.fqn} has strides {tuple(tensor.stride())}, the package was compiled for {self.stride}"
        return None


@attrs.frozen
class PackageWeights:
    """How a package holds its weights.

    in_package: whether the weights are compiled into the package (else it reads the module's).
    constants: the module tensors the package reads, by name.
    refit_blocker: why new weights cannot be taken without a rebuild; empty when they can.
    """

    in_package: bool = attrs.field(validator=attrs.validators.instance_of(bool))
    constants: tuple[ConstantSpec, ...] = attrs.field(converter=_specs)
    refit_blocker: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    def to_dict(self) -> dict[str, Any]:
        return dict(_CONVERTER.unstructure(self))

    @classmethod
    def from_dict(cls, data: Any) -> PackageWeights:
        try:
            return _CONVERTER.structure(data, cls)
        except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as error:
            raise ValueError(f"stored package weights are not readable: {error}") from None


_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


class WeightlessMismatch(RuntimeError):
    """A package compiled without weights reads constants the module has no tensor for."""


# ---------------------------------------------------------------------- at build
def compile_options(user_options: Mapping[str, Any] | None, weightless: bool) -> dict[str, Any]:
    """Inductor options for the package: the user's, and how it holds its weights unless they chose."""
    options = dict(user_options or {})
    if any(name in options for name in USER_WEIGHT_OPTIONS):
        return options
    if not weightless:
        return {**KEEP_CONSTANTS, **options}
    return {**KEEP_CONSTANTS, **WEIGHTLESS, "aot_inductor.metadata": dict([READS_MODULE]), **options}


def reads_module_weights(model: Any) -> bool:
    """Whether a loaded package was compiled to read its weights from the module (its metadata says so)."""
    get_metadata = getattr(model, "get_metadata", None)
    if not callable(get_metadata):
        return False
    key, value = READS_MODULE
    return bool(get_metadata().get(key) == value)


def can_read_module_weights() -> bool:
    """Whether this torch can serve a package from the module's tensors without copying them."""
    loader = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    load_constants = getattr(loader, "load_constants", None)
    return "user_managed" in (getattr(load_constants, "__doc__", None) or "") and hasattr(
        torch._C, "_construct_storage_from_data_pointer"
    )


def graph_tensors(program: Any) -> tuple[set[str], int]:
    """The parameters and buffers the exported graph uses, by name, and how many other tensor constants it uses."""
    signature = program.graph_signature
    state = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    lifted = set(signature.inputs_to_lifted_tensor_constants)
    used: set[str] = set()
    other = 0
    for node in program.graph.nodes:
        if node.op != "placeholder" or not node.users:
            continue
        if node.name in state:
            used.add(state[node.name])
        elif node.name in lifted:
            other += 1
    return used, other


def module_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``module`` by its name, tied ones under each of their names."""
    tensors: dict[str, torch.Tensor] = dict(module.named_buffers(remove_duplicate=False))
    tensors.update(module.named_parameters(remove_duplicate=False))
    return tensors


def package_weights(
    fqns: Iterable[str], tensors: Mapping[str, torch.Tensor], used: set[str], others: int, in_package: bool
) -> PackageWeights:
    """What a loaded package reads (``fqns``) against what the graph uses: which constants and whether to refit.

    tensors: the module's, by name; used: the ones the graph reads; others: how many
    other tensor constants it reads. Raises :class:`WeightlessMismatch` when a package
    compiled without weights reads a constant the module does not hold.
    """
    fqns = set(fqns)
    foreign = sorted(fqns - tensors.keys())
    if foreign and not in_package:
        raise WeightlessMismatch(f"the package reads {', '.join(foreign[:5])}, which the module does not hold")
    constants = tuple(ConstantSpec.of(fqn, tensors[fqn]) for fqn in sorted(fqns & tensors.keys()))
    blocker = ""
    derived = sorted(used - fqns)
    if derived:
        blocker = (
            f"the package computed its constants from {', '.join(derived[:5])} when it was compiled "
            "(freezing or constant folding), so new values of those need a rebuild"
        )
    elif len(foreign) > others:
        blocker = (
            f"the package holds constants it derived when it was compiled ({', '.join(foreign[:5])}), "
            "so new weights need a rebuild"
        )
    return PackageWeights(in_package, constants, blocker)


# ---------------------------------------------------------------------- serving and refitting
def checked_tensors(module: torch.nn.Module, weights: PackageWeights, device: torch.device) -> dict[str, torch.Tensor]:
    """The module's tensor for each constant the package reads; RefitError naming the first that does not fit."""
    tensors = module_tensors(module)
    found: dict[str, torch.Tensor] = {}
    for spec in weights.constants:
        tensor = tensors.get(spec.fqn)
        if tensor is None:
            raise RefitError(f"the module has no parameter or buffer {spec.fqn}, which the package reads")
        problem = spec.mismatch(tensor, device)
        if problem is not None:
            raise RefitError(f"{problem}; new weights of another layout need a rebuild")
        found[spec.fqn] = tensor
    return found


class ServedWeights:
    """The module's memory that a package compiled without weights reads, held while it is loaded."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[torch.UntypedStorage, int, int]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def bind(self, runner: Any, tensors: Mapping[str, torch.Tensor]) -> int:
        """Point the package at ``tensors`` (checked by :func:`checked_tensors`); returns how many changed.

        A tensor whose memory the package already reads is left as it is: weights written
        in place need nothing. The first bind hands over every constant and has the
        loader check that none is missing.
        """
        first = not self._held
        changed: dict[str, torch.Tensor] = {}
        held: dict[str, tuple[torch.UntypedStorage, int, int]] = {}
        for fqn, tensor in tensors.items():
            storage = tensor.untyped_storage()
            where = (storage.data_ptr(), int(tensor.storage_offset()))
            previous = self._held.get(fqn)
            if previous is not None and (previous[1], previous[2]) == where:
                held[fqn] = previous
                continue
            held[fqn] = (storage, *where)
            changed[fqn] = _unowned_view(tensor, storage)
        if changed:
            runner.load_constants(changed, check_full_update=first, user_managed=True)
        self._held = held  # the storages replaced go only now, once the package reads the new ones
        return len(changed)

    def release(self) -> None:
        """Let the memory go; call only once the package that read it is closed."""
        self._held = {}


def _unowned_view(tensor: torch.Tensor, storage: torch.UntypedStorage) -> torch.Tensor:
    """``tensor``'s layout over its memory, in a storage that does not own (or keep alive) that memory."""
    unowned = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), tensor.device, storage.nbytes())
    view = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return view.set_(unowned, tensor.storage_offset(), tensor.shape, tensor.stride())


def copy_into_package(runner: Any, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy ``tensors`` into the constants of a package that holds its own weights.

    The loader copies a tensor's whole storage, so each goes over as a compact copy
    when it is a view into a larger one.
    """
    compact = {
        fqn: (
            tensor.detach()
            if tensor.storage_offset() == 0
            and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
            else tensor.detach().clone()
        )
        for fqn, tensor in tensors.items()
    }
    runner.load_constants(compact, check_full_update=False, user_managed=False)
