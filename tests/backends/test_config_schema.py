"""Backend configs are data with a schema: allow-lists, strict structuring, unsafe_options never stored."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import pytest
import torch

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.backends.eager import TorchEagerBackend, TorchEagerBackendConfig
from aitune_core.backends.safe_options import (
    AllowList,
    BoolRule,
    ChoiceRule,
    FloatRule,
    IntRule,
    UnsafeOptionError,
    allowed_options,
    option_problems,
)
from aitune_core.serialization import ConfigDataError, converter, make_converter, structure_config

TOY_RULES: dict[str, Any] = {
    "fast": BoolRule(),
    "threads": IntRule(-1, 8),
    "ratio": FloatRule(0.0, 1.0),
    "search": ChoiceRule(("DEFAULT", "EXHAUSTIVE")),
    "gone_in_this_version": BoolRule(),
}
TOY = AllowList(
    what="toy option",
    rules=TOY_RULES,
    refusals=(("compiler", "it names a program"), ("*_path", "it names a path")),
    known=lambda: set(TOY_RULES) - {"gone_in_this_version"},
    listed_at="tests.TOY",
)
TEXT_TOY = attrs.evolve(TOY, text_values=True)


@attrs.frozen
class ToyConfig(BackendConfig):
    """A config with a free-form mapping guarded by :data:`TOY`."""

    options: dict[str, Any] | None = attrs.field(default=None, validator=allowed_options(TOY))
    level: int = 0
    name: str = ""
    scale: float = 1.0
    flag: bool = False
    maybe: int | None = None
    names: tuple[str, ...] = ()


class ToyBackend(Backend):
    name = "toy"
    config_class = ToyConfig

    def _build(self, context: BuildContext) -> None:
        pass

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return None


# --------------------------------------------------------------------------- allow-lists
@pytest.mark.parametrize(
    "options",
    [
        {"fast": True, "threads": -1, "ratio": 1, "search": "EXHAUSTIVE"},
        {"threads": 8, "ratio": 0.25},
        {},
    ],
)
def test_allowed_keys_with_valid_values_pass(options: dict[str, Any]) -> None:
    assert option_problems(TOY, "options", options) == []
    assert ToyConfig(options=options).options == options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compiler": "sh"}, r"options\['compiler'\] is not an allowed toy option: it names a program"),
        ({"cache_path": "/tmp"}, r"options\['cache_path'\] is not an allowed toy option: it names a path"),
        ({"other": 1}, r"options\['other'\] is not an allowed toy option: it is not on the list .* \(tests.TOY\)"),
        (
            {"gone_in_this_version": True},
            r"options\['gone_in_this_version'\] is not among the toy options of the installed",
        ),
        ({"fast": 1}, r"options\['fast'\] must be True or False, got 1 \(int\)"),
        ({"fast": "true"}, r"options\['fast'\] must be True or False"),
        ({"threads": True}, r"options\['threads'\] must be a whole number from -1 to 8, got True \(bool\)"),
        ({"threads": 9}, r"options\['threads'\] must be a whole number from -1 to 8, got 9"),
        ({"threads": 2.0}, r"options\['threads'\] must be a whole number"),
        ({"ratio": float("nan")}, r"options\['ratio'\] must be a finite number from 0.0 to 1.0"),
        ({"ratio": 1.5}, r"options\['ratio'\] must be a finite number from 0.0 to 1.0, got 1.5"),
        ({"ratio": False}, r"options\['ratio'\] must be a finite number"),
        ({"search": "FAST"}, r"options\['search'\] must be one of 'DEFAULT', 'EXHAUSTIVE', got 'FAST'"),
    ],
)
def test_refused_keys_and_values_are_named(options: dict[str, Any], message: str) -> None:
    (problem,) = option_problems(TOY, "options", options)
    assert re.match(message, problem), problem
    with pytest.raises(UnsafeOptionError, match=message):
        ToyConfig(options=options)


def test_refusals_say_how_to_use_the_key_anyway() -> None:
    with pytest.raises(UnsafeOptionError, match=r"pass unsafe_options=True to the config in code.*never stored"):
        ToyConfig(options={"compiler": "sh"})


def test_every_problem_is_reported_at_once() -> None:
    problems = option_problems(TOY, "opts", {"compiler": "sh", "threads": 99, "fast": True})
    assert [problem.split(" ")[0] for problem in problems] == ["opts['compiler']", "opts['threads']"]


def test_text_values_are_parsed_as_the_runtime_would() -> None:
    assert option_problems(TEXT_TOY, "o", {"fast": "1", "threads": "-1", "ratio": "0.5", "search": "DEFAULT"}) == []
    assert option_problems(TEXT_TOY, "o", {"fast": "True"}) == []
    assert option_problems(TEXT_TOY, "o", {"fast": "yes"}) == ["o['fast'] must be True or False, got 'yes' (str)"]
    assert option_problems(TEXT_TOY, "o", {"threads": "9"}) == [
        "o['threads'] must be a whole number from -1 to 8, got '9'"
    ]
    assert option_problems(TEXT_TOY, "o", {"threads": "1.5"})
    assert option_problems(TOY, "o", {"threads": "1"}), "text is only parsed where the runtime takes text"


def test_the_allow_list_may_depend_on_another_field() -> None:
    strict = AllowList(what="strict option", rules={})

    @attrs.frozen
    class Chooser(BackendConfig):
        lenient: bool = False
        options: dict[str, Any] | None = attrs.field(
            default=None, validator=allowed_options(lambda config: TOY if config.lenient else strict)
        )

    assert Chooser(lenient=True, options={"fast": True}).options == {"fast": True}
    with pytest.raises(UnsafeOptionError, match="not an allowed strict option"):
        Chooser(options={"fast": True})


# --------------------------------------------------------------------------- unsafe_options
def test_unsafe_options_lift_the_allow_list_in_code() -> None:
    config = ToyConfig(options={"compiler": "clang"}, unsafe_options=True)
    assert config.options == {"compiler": "clang"}
    with pytest.raises(UnsafeOptionError, match="compiler"):
        attrs.evolve(config, unsafe_options=False)
    assert attrs.evolve(config, level=2).unsafe_options is True
    backend = ToyBackend(options={"compiler": "clang"}, unsafe_options=True)
    assert backend.config.unsafe_options is True
    assert ToyBackend(ToyConfig(), options={"compiler": "gcc"}, unsafe_options=True).config.options == {
        "compiler": "gcc"
    }
    with pytest.raises(TypeError, match="unsafe_options"):
        ToyConfig(unsafe_options=1)  # type: ignore[arg-type]


def test_unsafe_options_is_keyword_only() -> None:
    field = attrs.fields(ToyConfig).unsafe_options
    assert field.kw_only and field.default is False
    assert ToyConfig({"fast": True}, 3).level == 3


def test_unsafe_options_is_never_stored_but_the_options_are_keyed() -> None:
    unsafe = ToyBackend(options={"compiler": "clang"}, unsafe_options=True)
    other = ToyBackend(options={"compiler": "gcc"}, unsafe_options=True)
    assert "unsafe_options" not in unsafe.config_dict()
    assert "unsafe_options" not in unsafe.to_dict()["config"]
    assert "unsafe_options" not in converter().unstructure(unsafe.config)
    assert unsafe.config_dict()["options"] == {"compiler": "clang"}
    assert unsafe.key() != other.key() != ToyBackend().key()
    assert ToyBackend(options={"fast": True}, unsafe_options=True).key() == ToyBackend(options={"fast": True}).key()


def test_describe_shows_unsafe_options_only_when_set() -> None:
    assert ToyBackend().describe() == "ToyBackend()"
    assert ToyBackend(unsafe_options=True).describe() == "ToyBackend(unsafe_options=True)"


def test_from_dict_refuses_data_that_sets_unsafe_options() -> None:
    for value in (True, False):
        with pytest.raises(ValueError, match="sets unsafe_options, which is only accepted in code"):
            ToyBackend.from_dict({"config": {"unsafe_options": value}})


def test_a_checkpoint_with_an_unsafe_option_is_refused_at_load_naming_the_key() -> None:
    saved = json.loads(json.dumps(ToyBackend(options={"compiler": "sh -c 'touch x'"}, unsafe_options=True).to_dict()))
    with pytest.raises(ConfigDataError, match="options\\['compiler'\\] is not an allowed toy option"):
        ToyBackend.from_dict(saved)


def test_structuring_ignores_an_unsafe_options_key() -> None:
    """Other readers of config data (shipped blueprints) get unsafe_options=False whatever the data says."""
    assert converter().structure({"unsafe_options": True}, ToyConfig).unsafe_options is False
    with pytest.raises(ConfigDataError, match="options\\['compiler'\\] is not an allowed toy option"):
        structure_config({"unsafe_options": True, "options": {"compiler": "sh"}}, ToyConfig)


# --------------------------------------------------------------------------- strict structuring
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"level": True}, "expected a whole number, got bool True @ config.level"),
        ({"level": "3"}, "expected a whole number, got str '3' @ config.level"),
        ({"level": 1.5}, "expected a whole number, got float 1.5 @ config.level"),
        ({"name": 5}, "expected a string, got int 5 @ config.name"),
        ({"name": ["a"]}, "expected a string, got list \\['a'\\] @ config.name"),
        ({"scale": "1.0"}, "expected a number, got str '1.0' @ config.scale"),
        ({"scale": True}, "expected a number, got bool True @ config.scale"),
        ({"flag": "yes"}, "expected true or false, got str 'yes' @ config.flag"),
        ({"flag": 1}, "expected true or false, got int 1 @ config.flag"),
        ({"maybe": "2"}, "expected a whole number, got str '2' @ config.maybe"),
        ({"names": "ab"}, "expected a list, got str 'ab' @ config.names"),
        ({"names": ["a", 1]}, "expected a string, got int 1 @ config.names\\[1\\]"),
        ({"options": {"fast": "x"}}, "options\\['fast'\\] must be True or False"),
    ],
)
def test_stored_values_of_the_wrong_json_type_are_refused_naming_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigDataError, match=f"the stored ToyConfig is invalid: {message}"):
        structure_config(data, ToyConfig)
    with pytest.raises(ConfigDataError, match=message):
        ToyBackend.from_dict({"config": data})


def test_stored_values_of_the_right_type_are_read() -> None:
    data = {"level": 2, "name": "n", "scale": 2, "flag": True, "maybe": None, "names": ["a", "b"]}
    config = structure_config(data, ToyConfig)
    assert (config.level, config.name, config.scale, config.flag, config.maybe) == (2, "n", 2.0, True, None)
    assert config.names == ("a", "b")
    assert isinstance(config.scale, float)
    assert structure_config({"maybe": 4}, ToyConfig).maybe == 4


def test_dtype_device_and_path_fields_take_only_text() -> None:
    fresh = make_converter()
    assert fresh.structure("float16", torch.dtype) is torch.float16
    assert fresh.structure("cpu", torch.device) == torch.device("cpu")
    for kind in (torch.dtype, torch.device):
        with pytest.raises(TypeError, match="a string"):
            fresh.structure(0, kind)


# --------------------------------------------------------------------------- the eager config
def test_eager_config_fields_are_validated() -> None:
    with pytest.raises(TypeError, match="autocast_enabled"):
        TorchEagerBackendConfig(autocast_enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="autocast_dtype must be a floating torch dtype"):
        TorchEagerBackendConfig(autocast_dtype=torch.int8)
    with pytest.raises(ValueError, match="autocast_dtype"):
        TorchEagerBackendConfig(autocast_dtype="float16")  # type: ignore[arg-type]


def test_eager_config_round_trips_and_refuses_bad_data() -> None:
    backend = TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16)
    restored = TorchEagerBackend.from_dict(json.loads(json.dumps(backend.to_dict())))
    assert restored.config == backend.config and restored.key() == backend.key()
    with pytest.raises(ConfigDataError, match=r"expected true or false, got str 'no' @ config\.autocast_enabled"):
        TorchEagerBackend.from_dict({"config": {"autocast_enabled": "no"}})
    with pytest.raises(ConfigDataError, match="autocast_dtype must be a floating torch dtype"):
        TorchEagerBackend.from_dict({"config": {"autocast_dtype": "torch.int64"}})
    with pytest.raises(ConfigDataError, match="expected a dtype name"):
        TorchEagerBackend.from_dict({"config": {"autocast_dtype": 16}})
