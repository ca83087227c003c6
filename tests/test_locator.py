"""Locators: walking nested arguments, access and semantic paths, get and replace."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from aitune_core.metadata import Locator, SampleMetadata, register_container
from aitune_core.metadata.containers import CONTAINERS
from aitune_core.metadata.locator import get_many, map_leaves, walk, walk_inputs, walk_outputs


@dataclasses.dataclass
class Plain:
    data: torch.Tensor
    note: str


@dataclasses.dataclass(frozen=True)
class Frozen:
    data: torch.Tensor
    scale: int = 2


@dataclasses.dataclass
class Derived:
    base: torch.Tensor
    doubled: torch.Tensor = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.base * 2


Pair = collections.namedtuple("Pair", ["left", "right"])


class Bag:
    """A user type metadata capture knows nothing about until it is registered."""

    def __init__(self, items: list[Any]) -> None:
        self.items = list(items)


@pytest.fixture
def bag_registered() -> Iterator[None]:
    register_container(Bag, flatten=lambda bag: list(enumerate(bag.items)), unflatten=lambda bag, ch: Bag(list(ch)))
    try:
        yield
    finally:
        CONTAINERS.unregister(Bag)


def paths(inputs: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(loc.display_path, loc.semantic_path, leaf) for loc, leaf in walk_inputs(inputs)]


def nested_inputs() -> dict[str, Any]:
    return {
        "values": [
            "first_arg",
            torch.arange(1),
            (torch.arange(2), torch.arange(3)),
            {"t": torch.arange(4)},
            Plain(data=torch.arange(5), note="info"),
        ],
        "t3": Plain(data=torch.arange(6), note="xyz"),
    }


# ---------------------------------------------------------------------- walking


def test_walk_visits_every_leaf_depth_first_in_order() -> None:
    inputs = nested_inputs()
    found = [(display, semantic) for display, semantic, _ in paths(inputs)]
    assert found == [
        ("values[0]", ("values", 0)),
        ("values[1]", ("values", 1)),
        ("values[2][0]", ("values", 2, 0)),
        ("values[2][1]", ("values", 2, 1)),
        ('values[3]["t"]', ("values", 3, "t")),
        ("values[4].data", ("values", 4, "data")),
        ("values[4].note", ("values", 4, "note")),
        ("t3.data", ("t3", "data")),
        ("t3.note", ("t3", "note")),
    ]
    leaves = [leaf for _, _, leaf in paths(inputs)]
    assert leaves[0] == "first_arg"
    assert leaves[4] is inputs["values"][3]["t"]
    assert leaves[7] is inputs["t3"].data


def test_walk_frozen_dataclass_and_init_false_field() -> None:
    inputs = {"f": Frozen(torch.ones(1)), "d": Derived(torch.ones(2))}
    assert [(display, semantic) for display, semantic, _ in paths(inputs)] == [
        ("f.data", ("f", "data")),
        ("f.scale", ("f", "scale")),
        ("d.base", ("d", "base")),
        ("d.doubled", ("d", "doubled")),
    ]
    assert torch.equal(paths(inputs)[3][2], torch.full((2,), 2.0))


def test_walk_namedtuple_uses_field_names() -> None:
    pair = Pair(torch.ones(1), 7)
    assert [(d, s, leaf) for d, s, leaf in paths({"p": pair})][1] == ("p.right", ("p", "right"), 7)
    assert paths({"p": pair})[0][0] == "p.left"


def test_walk_non_string_dict_keys_are_shown_with_repr() -> None:
    inputs = {"d": {1: torch.ones(1), (2, "x"): torch.ones(2), "s": torch.ones(3)}}
    assert [(display, semantic) for display, semantic, _ in paths(inputs)] == [
        ("d[1]", ("d", 1)),
        ("d[(2, 'x')]", ("d", (2, "x"))),
        ('d["s"]', ("d", "s")),
    ]


def test_registered_user_type_is_walked_and_unregistering_makes_it_a_leaf(bag_registered: None) -> None:
    bag = Bag([torch.ones(1), "label"])
    assert [(display, semantic) for display, semantic, _ in paths({"b": bag})] == [
        ("b.0", ("b", 0)),
        ("b.1", ("b", 1)),
    ]
    CONTAINERS.unregister(Bag)
    assert [(display, leaf) for display, _, leaf in paths({"b": bag})] == [("b", bag)]


def test_registered_user_type_with_index_steps() -> None:
    register_container(
        Bag, flatten=lambda bag: list(enumerate(bag.items)), unflatten=lambda bag, ch: Bag(list(ch)), step_kind="index"
    )
    try:
        assert [display for display, _, _ in paths({"b": Bag([torch.ones(1), torch.ones(2)])})] == ["b[0]", "b[1]"]
    finally:
        CONTAINERS.unregister(Bag)


def test_register_container_rejects_unknown_step_kind() -> None:
    with pytest.raises(ValueError, match="step_kind"):
        register_container(Bag, lambda b: [], lambda b, ch: b, step_kind="slot")  # type: ignore[arg-type]
    assert CONTAINERS.lookup(Bag) is None


def test_unknown_objects_strings_and_sets_are_leaves() -> None:
    class Opaque:
        pass

    opaque = Opaque()
    inputs = {"o": opaque, "s": "text", "set": {1, 2}, "n": None}
    assert [(display, leaf) for display, _, leaf in paths(inputs)] == [
        ("o", opaque),
        ("s", "text"),
        ("set", {1, 2}),
        ("n", None),
    ]


def test_empty_containers_have_no_leaves() -> None:
    assert paths({"a": [], "b": {}, "c": ()}) == []


def test_output_locators_are_rooted_at_output() -> None:
    found = [(loc.display_path, loc.semantic_path, loc.semantic_display) for loc, _ in walk_outputs(torch.ones(1))]
    assert found == [("output", (), "()")]
    found = [(loc.display_path, loc.semantic_display) for loc, _ in walk_outputs((torch.ones(1), {"k": 1}))]
    assert found == [("output[0]", "(0,)"), ('output[1]["k"]', "(1, 'k')")]


def test_cyclic_structure_raises_instead_of_recursing_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested more than"):
        list(walk(loop, Locator("loop")))


# ---------------------------------------------------------------------- semantic paths


def test_semantic_display_is_bare_name_for_one_step_and_tuple_otherwise() -> None:
    assert Locator("x").semantic_display == "x"
    assert Locator("values", (3, "t"), ("index", "key")).semantic_display == "('values', 3, 't')"
    assert Locator("t3", ("data",), ("attr",)).semantic_display == "('t3', 'data')"


def test_locators_compare_and_hash_by_root_and_keys() -> None:
    a = Locator("x").child(0, "index").child("t", "key")
    b = Locator("x", (0, "t"), ("index", "key"))
    assert a == b and hash(a) == hash(b)
    assert a != Locator("y", (0, "t"), ("index", "key"))
    assert len({a, b}) == 1
    assert repr(a) == 'Locator(x[0]["t"])'


def test_locator_needs_one_kind_per_key() -> None:
    with pytest.raises(ValueError, match="one kind per key"):
        Locator("x", (0, 1), ("index",))


# ---------------------------------------------------------------------- get


def test_get_returns_the_leaf_each_walked_locator_points_at() -> None:
    inputs = nested_inputs()
    for locator, leaf in walk_inputs(inputs):
        assert locator.get(inputs) is leaf


def test_get_with_non_string_keys_frozen_dataclass_and_namedtuple() -> None:
    tensor = torch.ones(3)
    inputs = {"d": {1: {(2, "x"): Frozen(tensor)}}, "p": Pair(left=5, right=tensor)}
    assert Locator("d", (1, (2, "x"), "data"), ("key", "key", "attr")).get(inputs) is tensor
    assert Locator("p", ("right",), ("attr",)).get(inputs) is tensor


def test_get_output_locator_on_the_output_value() -> None:
    outputs = (torch.ones(1), [torch.zeros(2)])
    assert Locator(None, (1, 0), ("index", "index")).get(outputs) is outputs[1][0]


def test_get_missing_step_raises_key_error() -> None:
    with pytest.raises(KeyError):
        Locator("x", (5,), ("index",)).get({"x": [1, 2]})
    with pytest.raises(KeyError, match="cannot step into"):
        Locator("x", ("a",), ("attr",)).get({"x": 3})


# ---------------------------------------------------------------------- replace


def test_replace_rebuilds_containers_and_never_mutates_the_input() -> None:
    inputs = nested_inputs()
    original_values = inputs["values"]
    original_tuple = inputs["values"][2]
    original_dict = inputs["values"][3]
    original_plain = inputs["values"][4]
    locator = Locator("values", (2, 0), ("index", "index"))
    new_tensor = torch.full((2,), 9)

    replaced = locator.replace(inputs, new_tensor)

    assert locator.get(replaced) is new_tensor
    assert replaced is not inputs and replaced["values"] is not original_values
    assert type(replaced["values"][2]) is tuple
    # untouched branches are shared, the input is as it was
    assert replaced["values"][3] is original_dict and replaced["t3"] is inputs["t3"]
    assert inputs["values"] is original_values and inputs["values"][2] is original_tuple
    assert torch.equal(inputs["values"][2][0], torch.arange(2))

    replaced = Locator("values", (3, "t"), ("index", "key")).replace(inputs, "x")
    assert replaced["values"][3] == {"t": "x"} and torch.equal(original_dict["t"], torch.arange(4))

    replaced = Locator("values", (4, "data"), ("index", "attr")).replace(inputs, "y")
    assert replaced["values"][4] == Plain("y", "info")
    assert replaced["values"][4] is not original_plain and torch.equal(original_plain.data, torch.arange(5))


def test_replace_keeps_namedtuple_frozen_dataclass_and_init_false_fields() -> None:
    inputs = {"p": Pair(torch.ones(1), 2), "f": Frozen(torch.ones(2)), "d": Derived(torch.ones(3))}

    out = Locator("p", ("right",), ("attr",)).replace(inputs, 3)
    assert type(out["p"]) is Pair and out["p"].right == 3 and inputs["p"].right == 2

    out = Locator("f", ("data",), ("attr",)).replace(inputs, "z")
    assert type(out["f"]) is Frozen and out["f"].data == "z" and out["f"].scale == 2
    assert torch.equal(inputs["f"].data, torch.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        out["f"].data = 1  # type: ignore[misc]

    out = Locator("d", ("doubled",), ("attr",)).replace(inputs, torch.zeros(3))
    assert torch.equal(out["d"].doubled, torch.zeros(3)) and torch.equal(out["d"].base, torch.ones(3))
    assert torch.equal(inputs["d"].doubled, torch.full((3,), 2.0))


def test_replace_in_registered_type_and_non_string_key(bag_registered: None) -> None:
    inputs = {"b": Bag([torch.ones(1), {7: "seven"}])}
    out = Locator("b", (1, 7), ("attr", "key")).replace(inputs, "SEVEN")
    assert isinstance(out["b"], Bag) and out["b"].items[1] == {7: "SEVEN"}
    assert inputs["b"].items[1] == {7: "seven"}


def test_replace_keeps_dict_and_list_subclasses() -> None:
    class Items(list):  # type: ignore[type-arg]
        pass

    inputs = {"o": collections.OrderedDict(a=Items([1, 2]))}
    out = Locator("o", ("a", 1), ("key", "index")).replace(inputs, 5)
    assert type(out["o"]) is collections.OrderedDict and type(out["o"]["a"]) is Items
    assert out["o"]["a"] == [1, 5] and inputs["o"]["a"] == [1, 2]


def test_replace_root_and_output_root() -> None:
    inputs = {"x": 1, "y": 2}
    assert Locator("x").replace(inputs, 3) == {"x": 3, "y": 2} and inputs == {"x": 1, "y": 2}
    outputs = (1, (2, 3))
    assert Locator(None, (1, 0), ("index", "index")).replace(outputs, 9) == (1, (9, 3))
    assert Locator(None).replace(outputs, "new") == "new"


def test_replace_missing_step_raises_key_error() -> None:
    with pytest.raises(KeyError):
        Locator("x", (2,), ("index",)).replace({"x": (1, 2)}, 0)


def test_map_leaves_rebuilds_in_one_pass() -> None:
    inputs = {"values": [1, (2, {"k": 3})], "p": Pair(4, 5)}
    seen: list[str] = []

    def bump(locator: Locator, leaf: Any) -> Any:
        seen.append(locator.display_path)
        return leaf + 10

    out = {name: map_leaves(value, Locator(name), bump) for name, value in inputs.items()}
    assert out == {"values": [11, (12, {"k": 13})], "p": Pair(14, 15)}
    assert type(out["p"]) is Pair
    assert seen == ["values[0]", "values[1][0]", 'values[1][1]["k"]', "p.left", "p.right"]
    assert inputs == {"values": [1, (2, {"k": 3})], "p": Pair(4, 5)}


def test_sample_metadata_locators_follow_walk_order() -> None:
    inputs = nested_inputs()
    meta = SampleMetadata.from_inputs(inputs, strict=True)
    assert [loc.display_path for loc, _ in meta.tensor_data] == [
        "values[1]",
        "values[2][0]",
        "values[2][1]",
        'values[3]["t"]',
        "values[4].data",
        "t3.data",
    ]
    assert [(loc.display_path, value) for loc, value in meta.other_data] == [
        ("values[0]", "first_arg"),
        ("values[4].note", "info"),
        ("t3.note", "xyz"),
    ]


def test_get_many_finds_every_leaf_and_flattens_each_container_once() -> None:
    flattened: list[str] = []

    class Layer:
        def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            self.keys, self.values = keys, values

    def flatten(layer: Layer) -> list[tuple[str, Any]]:
        flattened.append("layer")
        return [("keys", layer.keys), ("values", layer.values)]

    register_container(Layer, flatten, lambda layer, children: Layer(*children))
    try:
        arguments = {
            "x": torch.ones(1),
            "cache": [Layer(torch.zeros(2), torch.ones(2)), Layer(torch.ones(3), torch.zeros(3))],
        }
        locators = [loc for loc, _ in walk_inputs(arguments)]
        flattened.clear()
        found = get_many(arguments, locators)
        assert [leaf.shape[0] for leaf in found] == [1, 2, 2, 3, 3]
        assert all(a is b for a, b in zip(found, [loc.get(arguments) for loc in locators], strict=True))
        flattened.clear()
        get_many(arguments, locators)
        assert flattened == ["layer", "layer"]  # each layer once, though two tensors sit in each
    finally:
        CONTAINERS.unregister(Layer)
