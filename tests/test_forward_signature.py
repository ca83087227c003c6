"""ForwardSignature: normalising calls to parameter-keyed dicts, and binding them back."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from aitune_core.graphs import ForwardSignature, graph_key


def forward(x: Any, mask: Any = False, scale: float = 1.0) -> Any:
    return (x, mask, scale)


def variadic(a: Any, b: Any = 2, *rest: Any, c: Any, d: Any = 4, **options: Any) -> Any:
    return (a, b, rest, c, d, options)


def keyword_only(x: Any, *, mode: str = "train", temperature: float = 1.0) -> Any:
    return (x, mode, temperature)


def positional_only(x: Any, y: Any = 0, /, z: Any = 1) -> Any:
    return (x, y, z)


def check_round_trip(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """normalize, then bind, then call: the result must equal the original call's."""
    signature = ForwardSignature(fn)
    arguments = signature.normalize(args, kwargs)
    bound_args, bound_kwargs = signature.bind(arguments)
    assert fn(*bound_args, **bound_kwargs) == fn(*args, **kwargs)
    assert signature.normalize(bound_args, bound_kwargs) == arguments
    return arguments


def test_positional_keyword_and_mixed_calls_normalise_the_same() -> None:
    signature = ForwardSignature(forward)
    x = torch.ones(1)
    calls = [
        ((x, True), {}),
        ((x,), {"mask": True}),
        ((), {"x": x, "mask": True}),
        ((), {"mask": True, "x": x}),
    ]
    normalised = [signature.normalize(args, kwargs) for args, kwargs in calls]
    for arguments in normalised:
        assert list(arguments) == ["x", "mask"]
        assert arguments["x"] is x and arguments["mask"] is True
    assert len({graph_key(arguments, strict=True) for arguments in normalised}) == 1


def test_parameters_left_at_their_defaults_are_left_out() -> None:
    signature = ForwardSignature(forward)
    x = torch.ones(1)
    assert signature.normalize((x,), {}) == {"x": x}
    assert signature.normalize((x, False), {}) == {"x": x, "mask": False}
    assert signature.normalize((x,), {"scale": 2.0}) == {"x": x, "scale": 2.0}
    assert graph_key(signature.normalize((x,), {}), True) != graph_key(signature.normalize((x, False), {}), True)


def test_normalised_order_follows_the_signature_not_the_call() -> None:
    signature = ForwardSignature(forward)
    assert list(signature.normalize((), {"scale": 3.0, "mask": 1, "x": 0})) == ["x", "mask", "scale"]


def test_var_positional_and_var_keyword() -> None:
    arguments = check_round_trip(variadic, (1, 2, 5, 6), {"c": 3, "z": 9, "y": 8})
    assert arguments == {"a": 1, "b": 2, "rest": (5, 6), "c": 3, "options": {"y": 8, "z": 9}}
    assert check_round_trip(variadic, (1,), {"c": 3}) == {"a": 1, "c": 3}
    assert check_round_trip(variadic, (), {"a": 1, "c": 3, "d": 7}) == {"a": 1, "c": 3, "d": 7}


def test_keyword_order_inside_var_keyword_does_not_matter() -> None:
    signature = ForwardSignature(variadic)
    first = signature.normalize((1,), {"c": 3, "y": torch.ones(1), "z": 2})
    second = signature.normalize((1,), {"z": 2, "c": 3, "y": torch.ones(1)})
    assert list(first["options"]) == list(second["options"]) == ["y", "z"]
    assert graph_key(first, strict=True) == graph_key(second, strict=True)


def test_keyword_only_parameters() -> None:
    x = torch.ones(1)
    assert check_round_trip(keyword_only, (x,), {"temperature": 0.5}) == {"x": x, "temperature": 0.5}
    assert check_round_trip(keyword_only, (), {"x": x, "mode": "eval"}) == {"x": x, "mode": "eval"}
    signature = ForwardSignature(keyword_only)
    assert signature.bind({"x": x, "mode": "eval"}) == ((x,), {"mode": "eval"})


def test_positional_only_parameters() -> None:
    assert check_round_trip(positional_only, (1,), {"z": 5}) == {"x": 1, "z": 5}
    assert check_round_trip(positional_only, (1, 2, 3), {}) == {"x": 1, "y": 2, "z": 3}


def test_bind_passes_parameters_after_a_missing_one_by_keyword() -> None:
    signature = ForwardSignature(forward)
    assert signature.bind({"x": 1, "scale": 3.0}) == ((1,), {"scale": 3.0})
    assert forward(1, scale=3.0) == (1, False, 3.0)
    assert check_round_trip(forward, (1,), {"scale": 3.0}) == {"x": 1, "scale": 3.0}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((), {"x": 1, "scale": 2}), ((1,), {"mask": 0, "scale": 4})],
)
def test_bind_inverts_normalize(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_round_trip(forward, args, kwargs)


def test_through_functools_wraps() -> None:
    calls = []

    @functools.wraps(forward)
    def traced(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return forward(*args, **kwargs)

    signature = ForwardSignature(traced)
    assert signature.parameter_names == ["x", "mask", "scale"]
    assert signature.normalize((1,), {"mask": 2}) == signature.normalize((1, 2), {}) == {"x": 1, "mask": 2}
    check_round_trip(traced, (1,), {"scale": 2.0})
    assert calls


def test_through_functools_partial() -> None:
    fixed_x = functools.partial(forward, "X")
    signature = ForwardSignature(fixed_x)
    assert signature.parameter_names == ["mask", "scale"]
    assert signature.normalize((True,), {}) == signature.normalize((), {"mask": True}) == {"mask": True}
    check_round_trip(fixed_x, (), {"scale": 5.0})

    fixed_mask = functools.partial(forward, mask="M")
    signature = ForwardSignature(fixed_mask)
    assert signature.normalize((1,), {}) == {"x": 1}
    check_round_trip(fixed_mask, (1,), {"scale": 2.0})


def test_bound_method_of_a_module() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
            return x * factor

    module = Scale()
    signature = ForwardSignature(module.forward)
    assert signature.parameter_names == ["x", "factor"]
    x = torch.arange(3.0)
    arguments = signature.normalize((x,), {"factor": 3.0})
    args, kwargs = signature.bind(arguments)
    assert torch.equal(module(*args, **kwargs), x * 3.0)


def test_callable_without_a_signature_keeps_args_and_kwargs() -> None:
    signature = ForwardSignature(max)
    assert signature.signature is None and signature.parameter_names == []
    arguments = signature.normalize(([3, 9, 4],), {"default": 0})
    assert arguments == {"args": ([3, 9, 4],), "kwargs": {"default": 0}}
    args, kwargs = signature.bind(arguments)
    assert max(*args, **kwargs) == 9
    sorted_keys = signature.normalize(([],), {"key": abs, "default": 1})
    assert list(sorted_keys["kwargs"]) == ["default", "key"]
    assert signature.bind(signature.normalize((), {})) == ((), {})


def test_builtin_without_a_signature() -> None:
    signature = ForwardSignature(torch.add)
    arguments = signature.normalize((torch.ones(1), torch.ones(1)), {})
    args, kwargs = signature.bind(arguments)
    assert torch.equal(torch.add(*args, **kwargs), torch.full((1,), 2.0))


def test_invalid_call_raises_type_error_like_python() -> None:
    signature = ForwardSignature(forward)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        signature.normalize((1,), {"bogus": 2})
    with pytest.raises(TypeError):
        signature.normalize((), {})
    with pytest.raises(TypeError, match="multiple values"):
        signature.normalize((1,), {"x": 1})


def test_plans_are_cached_per_call_shape() -> None:
    signature = ForwardSignature(forward)
    signature.normalize((1,), {})
    signature.normalize((2,), {})
    signature.normalize((1,), {"mask": 1})
    assert len(signature._plans) == 2
    assert signature.normalize((7,), {}) == {"x": 7}


def test_as_bound_gives_calls_the_form_validation_used():
    def forward(x, mask=None, *, scale=1.0):
        return x

    signature = ForwardSignature(forward)
    x, mask = object(), object()
    keyword = signature.normalize((), {"x": x, "mask": mask})
    assert signature.as_bound((), {"x": x, "mask": mask}, keyword) == ((x, mask), {})
    positional = signature.normalize((x,), {"scale": 2.0})
    args, kwargs = (x,), {"scale": 2.0}
    bound = signature.as_bound(args, kwargs, positional)
    assert bound[0] is args and bound[1] is kwargs  # already in that form: passed through as given
