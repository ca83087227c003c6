"""Whether a graph's forward depends on the values in its tensors, not only on their shapes.

A compiler that traces shapes ahead of time cannot take every such forward:
``nonzero`` or a boolean mask makes an output (or an intermediate) whose size only the
data decides, and ``.item()`` or ``int(tensor)`` followed by an ``if`` makes the
control flow itself depend on the data. Finding out by building costs a full export
or compile; running the forward once on fake tensors (shapes and dtypes, no data)
costs about one eager call, and says which op is at fault. A backend asks before it
builds and declines the graph with that reason (``Backend.declines`` returning
:func:`data_dependent_reason`); partitioning then leaves that submodule eager and
compiles its neighbours.

Two checks, each a fake run of one stored sample:

1. Without a symbolic shape environment, the first op whose output size or value
   depends on the data raises: that op is named (``aten.nonzero``).
2. Backends that export with symbolic sizes (``torch.export``, the ONNX exporter) can
   carry a data-dependent size through the graph, but not a Python decision on a
   data-dependent value. For them the forward runs again with a shape environment,
   where only such a decision raises.

Whatever else goes wrong in a fake run (an op without a fake implementation, a device
mix-up) means "cannot tell", and the backend builds as before.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import torch

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import Sample
from aitune_core.log import get_logger
from aitune_core.metadata.copies import owned_copy
from aitune_core.metadata.locator import Locator, map_leaves

Kind = Literal["output shape", "value", "control flow"]


@attrs.frozen
class DataDependence:
    """What in a forward depends on the data: the kind and the op that made it so."""

    kind: Kind
    op: str

    @property
    def reason(self) -> str:
        if self.kind == "output shape":
            return f"data-dependent output shape: {self.op}"
        if self.kind == "value":
            return f"data-dependent value: {self.op} (a tensor read as a Python number)"
        return f"data-dependent control flow: a Python decision on a tensor's value ({self.op})"

    @property
    def hint(self) -> str:
        return (
            "tune with partition=True to keep only the submodule that holds it eager, or express it with "
            "torch.where / torch.cond"
        )


def find_data_dependence(
    module: torch.nn.Module,
    signature: ForwardSignature,
    sample: Sample,
    device: torch.device,
    symbolic_sizes: bool = False,
) -> DataDependence | None:
    """What makes ``module``'s forward depend on its data for ``sample``, or None (none found, or cannot tell).

    symbolic_sizes: the caller compiles with symbolic sizes, so a data-dependent size is
        fine and only a Python decision on the data counts.
    """
    first = _fake_run(module, signature, sample, device, symbolic=False)
    if first is None or not symbolic_sizes:
        return first
    decided = _fake_run(module, signature, sample, device, symbolic=True)
    return DataDependence("control flow", first.op) if decided is not None else None


def data_dependent_reason(context: Any, symbolic_sizes: bool = False) -> str | None:
    """Why the graph of ``context`` (a BuildContext) cannot be compiled because it depends on its data, or None.

    For ``Backend.declines``: the candidate is then skipped with this reason before any
    export or compile. Graphs without stored samples cannot be checked and pass.
    """
    if not context.samples:
        return None
    found = find_data_dependence(context.module, context.signature, context.samples[0], context.device, symbolic_sizes)
    if found is None:
        return None
    get_logger(module=context.module_name, graph=context.graph_spec.name).info(
        "backend declines the graph", reason=found.reason, hint=found.hint
    )
    return found.reason


def _fake_run(
    module: torch.nn.Module, signature: ForwardSignature, sample: Sample, device: torch.device, symbolic: bool
) -> DataDependence | None:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

    # An owned copy: a forward that writes into its inputs never reaches the stored sample.
    arguments = owned_copy(sample.arguments, device)
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv() if symbolic else None)
    args, kwargs = signature.bind(_faked(arguments, mode))
    try:
        with torch.no_grad(), mode:
            module(*args, **kwargs)
    except DynamicOutputShapeException as error:
        return DataDependence("output shape", _op_name(error.func))
    except DataDependentOutputException as error:
        return DataDependence("value", _op_name(error.func))
    except GuardOnDataDependentSymNode:
        return DataDependence("control flow", "a Python branch on a tensor's value")
    except Exception as error:  # an op without a fake kernel, say: cannot tell, so do not decline
        get_logger().debug("data dependence unknown", reason=f"{type(error).__name__}: {error}"[:300])
    return None


def _faked(arguments: Any, mode: Any) -> Any:
    def fake(_locator: Locator, leaf: Any) -> Any:
        return mode.from_tensor(leaf) if isinstance(leaf, torch.Tensor) and not leaf.is_meta else leaf

    return map_leaves(arguments, Locator(None), fake)


def _op_name(func: Any) -> str:
    """``aten.nonzero`` for the overload ``aten.nonzero.default``."""
    packet = getattr(func, "overloadpacket", None)
    return str(packet) if packet is not None else str(func)
