"""Backends whose config could not be stored are refused when they register; every key is the same in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aitune_core
from aitune_core.plugins import PluginStatus

ROOT = Path(aitune_core.__file__).resolve().parents[1]

PLUGIN = """
from typing import Any

import attrs

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig

AITUNE_PLUGIN_API = 1


class Precision:
    def __init__(self, bits: int = 16) -> None:
        self.bits = bits

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Precision) and other.bits == self.bits


@attrs.frozen
class {name}Config(BackendConfig):
    precision: Precision | None = None
    {extra_field}


class {name}Backend(Backend):
    name = "{backend}"
    config_class = {name}Config

    def _build(self, context):
        self.runs = context.module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.runs(*args, **kwargs)


@hookimpl
def aitune_register_backends():
    return [{name}Backend]

{hook}
"""

TEACHES_PRECISION = """
@hookimpl
def aitune_extend_converter(converter):
    converter.register_unstructure_hook(Precision, lambda p: p.bits)
    converter.register_structure_hook(Precision, lambda bits, _: Precision(bits))
"""


def _source(name: str, backend: str, hook: str = "", extra_field: str = "") -> str:
    return PLUGIN.format(name=name, backend=backend, hook=hook, extra_field=extra_field)


def test_a_config_field_of_an_unknown_type_refuses_the_plugin_naming_backend_field_and_hook(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    dist = aitune_fake_dist("aitune-fake-untaught", _source("Untaught", "untaught"))
    record = next(r for r in aitune_isolated_plugins.load(dist).records() if r.distribution == dist.distribution)
    assert record.status is PluginStatus.FAILED
    for words in ("UntaughtBackend", "field `precision`", "Precision is a type the converter does not know"):
        assert words in record.reason
    assert "aitune_extend_converter" in record.reason


def test_a_type_the_plugin_teaches_the_converter_is_accepted(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    dist = aitune_fake_dist("aitune-fake-taught", _source("Taught", "taught", hook=TEACHES_PRECISION))
    record = next(r for r in aitune_isolated_plugins.load(dist).records() if r.distribution == dist.distribution)
    assert record.status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE), record.reason
    assert record.backends == ("taught",)


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("sizes: dict[int, str] = attrs.Factory(dict)", "int keys, which come back from JSON as strings"),
        ("names: set[str] = attrs.Factory(set)", "set[str] does not go to JSON"),
    ],
    ids=["int-keys", "set"],
)
def test_containers_that_do_not_survive_json_are_refused(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, field: str, words: str
) -> None:
    source = _source("Boxed", "boxed", hook=TEACHES_PRECISION, extra_field=field)
    dist = aitune_fake_dist("aitune-fake-boxed", source)
    record = next(r for r in aitune_isolated_plugins.load(dist).records() if r.distribution == dist.distribution)
    assert record.status is PluginStatus.FAILED and words in record.reason, record.reason


KEYS = """
import json

import torch

from aitune_core.plugins import default_candidates, get_backend_class, plugins

keys = {}
for record in plugins():
    for name in record.backends:
        keys[name] = get_backend_class(name)().key()
for device in ("cpu", "cuda"):
    for candidate in default_candidates(device):
        keys[f"{device}: {candidate.backend.describe()}"] = candidate.backend.key()
autocast = get_backend_class("eager")(autocast_enabled=True, autocast_dtype=torch.bfloat16)
keys[autocast.describe()] = autocast.key()
print(json.dumps(keys))
"""


@pytest.mark.together  # every installed backend
def test_every_installed_backend_has_the_same_default_key_in_two_fresh_processes() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])

    def keys() -> dict[str, str]:
        run = subprocess.run([sys.executable, "-c", KEYS], capture_output=True, text=True, env=environ, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    first, second = keys(), keys()
    assert "eager" in first and any(name.startswith("cpu: ") for name in first)
    assert first == second
