"""Mapping an exported graph's constants to the module's tensors, and making them again from new weights.

The constants here are made by hand the way exporters make them (a copy under the
tensor's name, a transposed weight, a BatchNorm folded into the convolution before it,
a bias reshaped), so the map is checked without exporting anything.
"""

from __future__ import annotations

import pytest
import torch

from aitune_core.backends.base import RefitError
from aitune_core.exported.weight_map import (
    COPY,
    NORM_BIAS,
    NORM_WEIGHT,
    TRANSPOSE,
    constant_values,
    weight_map_from_data,
    weight_map_to_data,
)
from aitune_core.exported.weight_matching import Constant, graph_reads, map_constants


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-1, 1)
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))).mean((2, 3)))


def exported_constants(model: ConvNet) -> dict[str, Constant]:
    """What an optimizing exporter keeps of ``model``: BatchNorm folded, the head transposed, its bias reshaped."""
    norm = model.norm
    with torch.no_grad():
        scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
        weight = model.conv.weight * scale.reshape(-1, 1, 1, 1)
        bias = (model.conv.bias - norm.running_mean) * scale + norm.bias
        return {
            "conv_w": Constant(weight.clone(), name="conv.weight"),  # the exporter kept the name, not the values
            "conv_b": Constant(bias.clone()),
            "head_t": Constant(model.head.weight.t().clone()),
            "head_b": Constant(model.head.bias.reshape(1, 2).clone()),
            "shape": Constant(torch.tensor([1, -1])),
        }


def test_each_constant_is_made_again_from_new_weights() -> None:
    torch.manual_seed(0)
    model = ConvNet().eval()
    weight_map = map_constants(model, exported_constants(model), reads=None)
    kinds = {name: source.kind for name, source in weight_map.constants.items()}
    assert kinds == {"conv_w": NORM_WEIGHT, "conv_b": NORM_BIAS, "head_t": TRANSPOSE, "head_b": COPY}
    assert [item.name for item in weight_map.frozen] == ["norm.num_batches_tracked"]  # taken as read: no probe

    torch.manual_seed(1)
    model.load_state_dict(ConvNet().state_dict(), strict=True)
    values = constant_values(weight_map, model, "test")
    expected = exported_constants(model)
    for name, value in values.items():
        torch.testing.assert_close(value, expected[name].value, rtol=1e-6, atol=1e-6, msg=name)


def test_the_map_survives_data_and_checks_what_it_reads() -> None:
    torch.manual_seed(0)
    model = ConvNet().eval()
    weight_map = map_constants(model, exported_constants(model), reads=None)
    assert weight_map_from_data(weight_map_to_data(weight_map)) == weight_map

    with torch.no_grad():
        model.norm.num_batches_tracked += 1  # frozen (no probe said it is unread): a refit stops
    with pytest.raises(RefitError, match=r"norm\.num_batches_tracked changed"):
        constant_values(weight_map, model, "test")
    model.head = torch.nn.Linear(4, 3)
    with pytest.raises(RefitError, match=r"head\.weight is \(3, 4\).*it was \(2, 4\)"):
        constant_values(weight_map, model, "test")


def test_a_probe_leaves_unread_tensors_free_and_the_module_untouched() -> None:
    torch.manual_seed(0)
    model = ConvNet().eval()
    model.norm.train()  # updates its running statistics in place on every call
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    x = torch.randn(2, 3, 6, 6)

    def run(overrides: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        return (torch.func.functional_call(model, overrides, (x,)),)

    weight_map = map_constants(model, exported_constants(model), reads=graph_reads(run, model))
    assert [item.name for item in weight_map.frozen] == []  # momentum is set: num_batches_tracked is not read
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_equal_tensors_exported_as_one_constant_must_stay_equal() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    with torch.no_grad():
        model[0].bias.fill_(0.5)
        model[1].bias.fill_(0.5)
    constants = {
        "w0": Constant(model[0].weight.clone(), name="0.weight"),
        "w1": Constant(model[1].weight.clone(), name="1.weight"),
        "b": Constant(model[0].bias.clone()),
    }
    weight_map = map_constants(model, constants, reads=None)
    assert weight_map.equal == [["0.bias", "1.bias"]]
    with torch.no_grad():
        model[1].bias.fill_(0.25)
    with pytest.raises(RefitError, match=r"0\.bias and 1\.bias were equal when exported"):
        constant_values(weight_map, model, "test")


class TwoBlocks(torch.nn.Module):
    """Two convolutions of one shape, each before a BatchNorm at its initial values; the second norm weighs zero."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.norm1 = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.norm2 = torch.nn.BatchNorm2d(4)
        torch.nn.init.zeros_(self.norm2.weight)  # as zero_init leaves a residual block's last norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))


def folded_weights(model: TwoBlocks) -> dict[str, Constant]:
    """The convolutions' weights with their norms folded in, and no bias: an optimizer drops a bias of zeros."""
    constants = {}
    with torch.no_grad():
        for index, (conv, norm) in enumerate(((model.conv1, model.norm1), (model.conv2, model.norm2))):
            scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
            constants[f"w{index}"] = Constant((conv.weight * scale.reshape(-1, 1, 1, 1)).clone())
    return constants


def test_a_fold_several_norms_explain_is_refitted_while_they_agree() -> None:
    torch.manual_seed(0)
    model = TwoBlocks().eval()
    weight_map = map_constants(model, folded_weights(model), reads=None)
    # Folded with norm2's zero weight, w1 is zeros: conv1's weight or conv2's explains it.
    assert [(source.tensor, source.norm) for source in weight_map.alternatives["w1"]] == [("conv2.weight", "norm2")]
    assert weight_map.constants["w1"].tensor == "conv1.weight" and "w0" not in weight_map.alternatives

    torch.manual_seed(1)
    model.load_state_dict(TwoBlocks().state_dict())  # another seed: new convolutions, norm2 still zero
    values = constant_values(weight_map, model, "test")
    for name, constant in folded_weights(model).items():
        torch.testing.assert_close(values[name], constant.value, rtol=1e-6, atol=1e-7, msg=name)

    with torch.no_grad():
        model.norm2.weight.fill_(2.0)  # conv1 and conv2 now make different values: which was it?
    with pytest.raises(RefitError, match="w1 could be made from more than one set of tensors"):
        constant_values(weight_map, model, "test")


def test_the_probe_sees_a_tensor_that_a_zero_weight_hides_now() -> None:
    torch.manual_seed(0)
    model = TwoBlocks().eval()
    x = torch.randn(1, 4, 5, 5)

    def run(overrides: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        return (torch.func.functional_call(model, overrides, (x,)),)

    reads = graph_reads(run, model)
    assert reads(["norm1.bias"])  # norm2's zero weight hides it at these values, not at others
    assert not reads(["norm1.num_batches_tracked"])
    weight_map = map_constants(model, folded_weights(model), reads=reads)
    frozen = {item.name for item in weight_map.frozen}
    assert {"norm1.bias", "norm1.running_mean", "norm2.bias", "norm2.running_mean"} <= frozen  # no constant holds them
