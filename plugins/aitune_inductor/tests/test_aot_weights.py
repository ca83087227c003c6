"""How an AOT package's weights are described and handed over, without compiling a package.

A recording stand-in for torch's loader takes the constants; the real loader is
exercised by test_aot_refit.py.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import RefitError
from aitune_inductor import aot_weights
from aitune_inductor.aot_weights import ConstantSpec, PackageWeights, ServedWeights


class RecordingLoader:
    """Takes constants as torch's package loader does, and keeps what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, torch.Tensor], bool, bool]] = []

    def load_constants(self, constants: dict[str, torch.Tensor], *, check_full_update: bool, user_managed: bool) -> Any:
        self.calls.append((dict(constants), check_full_update, user_managed))


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 3)).eval()


def described(module: torch.nn.Module, in_package: bool = False) -> PackageWeights:
    tensors = aot_weights.module_tensors(module)
    return aot_weights.package_weights(tensors, tensors, set(tensors), 0, in_package)


def test_a_package_reading_every_weight_can_refit() -> None:
    weights = described(model())
    assert weights.refit_blocker == "" and not weights.in_package
    names = [spec.fqn for spec in weights.constants]
    assert names == ["0.bias", "0.weight", "1.bias", "1.weight", "2.bias", "2.weight"]
    assert PackageWeights.from_dict(weights.to_dict()) == weights


def test_weights_folded_at_compile_time_block_refit() -> None:
    """A used parameter the package does not read was folded into something else: new values of it need a rebuild."""
    tensors = aot_weights.module_tensors(model())
    read = set(tensors) - {"1.weight", "1.bias"}
    weights = aot_weights.package_weights(read | {"_frozen_param0"}, tensors, set(tensors), 0, in_package=True)
    assert "1.bias, 1.weight" in weights.refit_blocker and "rebuild" in weights.refit_blocker


def test_derived_constants_beyond_the_graphs_own_block_refit() -> None:
    tensors = aot_weights.module_tensors(model())
    own = aot_weights.package_weights([*tensors, "_tensor_constant0"], tensors, set(tensors), 1, in_package=True)
    assert own.refit_blocker == ""  # the graph's own tensor constant: it keeps its compiled value
    derived = aot_weights.package_weights([*tensors, "_tensor_constant0"], tensors, set(tensors), 0, in_package=True)
    assert "_tensor_constant0" in derived.refit_blocker


def test_a_weightless_package_needs_every_constant_from_the_module() -> None:
    tensors = aot_weights.module_tensors(model())
    with pytest.raises(aot_weights.WeightlessMismatch, match="_tensor_constant0"):
        aot_weights.package_weights([*tensors, "_tensor_constant0"], tensors, set(tensors), 0, in_package=False)


def test_the_users_weight_options_win() -> None:
    assert aot_weights.compile_options(None, weightless=True) == {
        "always_keep_tensor_constants": True,
        "aot_inductor.package_constants_in_so": False,
        "aot_inductor.metadata": {"aitune_weights": "module"},
    }
    assert aot_weights.compile_options({"max_autotune": True}, weightless=False) == {
        "always_keep_tensor_constants": True,
        "max_autotune": True,
    }
    assert aot_weights.compile_options({"freezing": True}, weightless=True) == {"freezing": True}


def test_stored_descriptions_are_checked() -> None:
    data = described(model()).to_dict()
    data["constants"][0]["dtype"] = "float99"
    with pytest.raises(ValueError, match="not readable"):
        PackageWeights.from_dict(data)
    with pytest.raises(ValueError, match="not readable"):
        PackageWeights.from_dict({**described(model()).to_dict(), "extra": 1})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: setattr(m[2], "weight", torch.nn.Parameter(torch.randn(5, 6))), r"2\.weight has shape \(5, 6\)"),
        (lambda m: m.half(), r"0\.bias is torch\.float16"),
        (lambda m: setattr(m[2], "weight", torch.nn.Parameter(torch.randn(6, 3).t())), r"2\.weight has strides"),
        (lambda m: delattr(m[1], "bias") or m[1].register_parameter("bias", None), r"no parameter or buffer 1\.bias"),
    ],
)
def test_tensors_of_another_layout_are_refused_by_name(change: Any, message: str) -> None:
    module = model()
    weights = described(module)
    change(module)
    with pytest.raises(RefitError, match=message):
        aot_weights.checked_tensors(module, weights, torch.device("cpu"))


def test_binding_hands_over_views_that_own_nothing_and_only_what_changed() -> None:
    module = model()
    weights = described(module)
    loader, served = RecordingLoader(), ServedWeights()
    assert served.bind(loader, aot_weights.checked_tensors(module, weights, torch.device("cpu"))) == 6
    given, full, user_managed = loader.calls[0]
    assert full and user_managed
    assert given["0.weight"].data_ptr() == module[0].weight.data_ptr()
    # Another storage over the same memory: the loader never drops what it is given, and must own nothing.
    assert given["0.weight"].untyped_storage()._cdata != module[0].weight.untyped_storage()._cdata
    assert torch.equal(given["2.weight"], module[2].weight)

    # Written in place (load_state_dict): the package reads them already, nothing to hand over.
    module.load_state_dict(model().state_dict())
    assert served.bind(loader, aot_weights.checked_tensors(module, weights, torch.device("cpu"))) == 0
    assert len(loader.calls) == 1

    # A replaced parameter is handed over alone; its predecessor's memory is held until then, and not after.
    old = weakref.ref(module[2].weight)
    module[2].weight = torch.nn.Parameter(torch.randn(3, 6))
    gc.collect()
    assert old() is None  # the view handed over holds the parameter's memory, not the parameter
    assert served.bind(loader, aot_weights.checked_tensors(module, weights, torch.device("cpu"))) == 1
    given, full, _ = loader.calls[1]
    assert list(given) == ["2.weight"] and not full


def test_copies_into_a_package_are_compact() -> None:
    """The loader copies a tensor's whole storage: a view into a larger one goes over as a copy of the view."""
    loader = RecordingLoader()
    big = torch.randn(10, 6)
    aot_weights.copy_into_package(loader, {"a": big[2:5], "b": big})
    given, full, user_managed = loader.calls[0]
    assert not full and not user_managed
    assert given["a"].untyped_storage().nbytes() == 3 * 6 * 4 and torch.equal(given["a"], big[2:5])
    assert given["b"].data_ptr() == big.data_ptr()


def test_constant_spec_names_the_device() -> None:
    spec = ConstantSpec.of("w", torch.zeros(2))
    assert spec.mismatch(torch.zeros(2), torch.device("cpu")) is None
    assert "on cpu, the package on meta" in str(spec.mismatch(torch.zeros(2), torch.device("meta")))
