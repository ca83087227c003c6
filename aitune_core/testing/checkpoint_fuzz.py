"""Hostile-manifest fuzzing for checkpoints, for aitune's tests and for backend authors.

Every string in a real manifest is replaced, one at a time, by hostile values: shell
metacharacters that would touch a canary, absolute and ``..`` paths to canary files,
``module:function`` references, and values of the wrong JSON type. Each mutated
manifest goes through all of ``load``'s checks (:func:`plan_load`), which read
everything and change nothing. The fuzz reports which were refused and which were
accepted; tests then load one accepted mutation per field for real and check the
answers, and check that the canaries were never touched.

A backend's own test tunes a small model with it alone and saves it
(:func:`tune_and_save`), then holds the checkpoint to the fuzz
(:func:`assert_tuned_checkpoint_survives_fuzzing`).
"""

from __future__ import annotations

import copy
import gc
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend
from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.load_plan import plan_load
from aitune_core.checkpoint.manifest import MANIFEST_NAME
from aitune_core.checkpoint.save import save
from aitune_core.checkpoint.signing import SIGNATURE_NAME
from aitune_core.config import config
from aitune_core.errors import CheckpointError
from aitune_core.module.wrapper import Module
from aitune_core.strategies.first_wins import FirstWinsStrategy
from aitune_core.testing.timing import FAST_PROFILE
from aitune_core.tuning import tune

JsonPath = tuple[str | int, ...]


@attrs.define
class Canaries:
    """A file and a folder that hostile values aim at; neither may ever change."""

    file: Path
    folder: Path
    content: bytes = b"canary: must never change\n"

    @classmethod
    def make(cls, where: Path) -> Canaries:
        where.mkdir(parents=True, exist_ok=True)
        canaries = cls(where / "canary.txt", where / "canary-dir")
        canaries.file.write_bytes(canaries.content)
        canaries.folder.mkdir(exist_ok=True)
        return canaries

    def assert_untouched(self) -> None:
        assert self.file.read_bytes() == self.content, f"{self.file} was changed"
        assert list(self.folder.iterdir()) == [], f"{self.folder} gained {sorted(self.folder.iterdir())}"


def hostile_values(canaries: Canaries) -> list[Any]:
    """Values an attacker would write into a manifest string."""
    touch = f"touch {canaries.folder}/pwned"
    return [
        f"; {touch}",
        f"$({touch})",
        f"`{touch}`",
        f"off -wrapper 'sh,-c,{touch}'",
        f"x && {touch} #",
        str(canaries.file),
        str(canaries.folder / "pwned"),
        f"../../../../../../..{canaries.file}",
        "../" * 12 + "etc/passwd",
        "..",
        "/",
        "os:system",
        "subprocess:Popen",
        "builtins:eval",
        "torch._inductor.config",
        "__import__('os').system('true')",
        "\x00",
        "",
        "A" * 5000,
        ["list", "instead", "of", "text"],
        {"dict": "instead of text"},
        12345,
        True,
        None,
    ]


def string_paths(data: Any, prefix: JsonPath = ()) -> Iterator[JsonPath]:
    """The path of every string value in a JSON document."""
    if isinstance(data, str):
        yield prefix
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from string_paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from string_paths(value, (*prefix, index))


def _replaced(data: Any, path: JsonPath, value: Any) -> Any:
    mutated = copy.deepcopy(data)
    node = mutated
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return mutated


def field_name(path: JsonPath) -> str:
    """The path with list indices folded (``modules[].graphs[].backend.name``): one name per field."""
    return ".".join("[]" if isinstance(part, int) else str(part) for part in path).replace(".[]", "[]")


@attrs.define
class FuzzReport:
    cases: int = 0
    refused: int = 0
    accepted: dict[str, bytes] = attrs.field(factory=dict)
    """Field name -> one accepted mutated manifest, to be loaded for real."""
    unexpected: list[str] = attrs.field(factory=list)
    """Errors other than CheckpointError: each one is a bug."""


def fuzz_manifest(model: nn.Module, root: Path, canaries: Canaries, trust_native_code: bool = True) -> FuzzReport:
    """Run every hostile mutation of ``root``'s manifest through ``load``'s checks."""
    original = json.loads((root / MANIFEST_NAME).read_bytes())
    report = FuzzReport()
    for path in string_paths(original):
        for value in hostile_values(canaries):
            data = json.dumps(_replaced(original, path, value)).encode()
            report.cases += 1
            try:
                plan_load(model, root, data, None, trust_native_code, None)
            except CheckpointError:
                report.refused += 1
            except Exception as error:  # reported: each one is a finding
                report.unexpected.append(f"{field_name(path)} = {value!r:.60}: {type(error).__name__}: {error}")
            else:
                report.accepted.setdefault(field_name(path), data)
    return report


def assert_hostile_manifests_are_safe(
    build_model: Callable[[], nn.Module],
    checkpoint: Path,
    canaries: Canaries,
    check_loaded: Callable[[nn.Module], None],
    scratch: Path,
) -> FuzzReport:
    """Fuzz ``checkpoint``'s manifest, then load one accepted mutation per field for real.

    ``check_loaded`` gets each loaded model and asserts it answers as the original did.
    Canaries must be untouched afterwards, and nothing but CheckpointError may be raised.
    """
    model = build_model()
    report = fuzz_manifest(model, checkpoint, canaries)
    assert report.unexpected == [], "\n".join(report.unexpected[:20])
    canaries.assert_untouched()
    for index, (field, data) in enumerate(sorted(report.accepted.items())):
        copy = scratch / f"accepted-{index}"
        shutil.copytree(checkpoint, copy)
        (copy / MANIFEST_NAME).write_bytes(data)
        (copy / SIGNATURE_NAME).unlink(missing_ok=True)
        try:
            loaded = load(build_model(), copy, trust_native_code=True)
        except CheckpointError:
            continue  # refused when deploying: as good as refused when checking
        try:
            check_loaded(loaded)
        except Exception as error:
            message = f"the manifest with a hostile {field} loaded, and then failed: {type(error).__name__}: {error}"
            raise AssertionError(message) from None
        del loaded
        gc.collect()
    canaries.assert_untouched()
    return report


@attrs.define
class TunedCheckpoint:
    """A model tuned with one backend and saved, and one call's input and answer from before the save."""

    path: Path
    x: torch.Tensor
    y: torch.Tensor


def tune_and_save(
    build_model: Callable[[], nn.Module], features: int, backend: Backend, folder: Path, name: str
) -> TunedCheckpoint:
    """Tune ``build_model()`` (inputs of ``features`` values) with ``backend`` alone, and save it in ``folder``.

    Builds go to ``folder/cache``; the config's cache folder is put back afterwards, so
    a fixture may call this in the middle of a test. The tuned model is gone once this
    returns, as it would be in the process that loads the checkpoint.
    """
    previous = config.cache_dir
    config.cache_dir = folder / "cache"
    try:
        module = Module(build_model(), name)
        strategy = FirstWinsStrategy([backend], profile=FAST_PROFILE).enable_performance_validation(False)
        tune(module, [torch.randn(features) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
        path = save(module, folder / "ckpt")
        x = torch.randn(3, features)
        with torch.no_grad():
            y = module(x)
        del module
    finally:
        config.cache_dir = previous
    return TunedCheckpoint(path, x, y)


def assert_tuned_checkpoint_survives_fuzzing(
    build_model: Callable[[], nn.Module], saved: TunedCheckpoint, scratch: Path, rtol: float, atol: float
) -> FuzzReport:
    """Every hostile manifest of ``saved`` is refused, or loads and answers as the tuned model did.

    Most mutations must be refused, and a hostile backend name never accepted: a
    checkpoint names the code that runs it.
    """

    def same_answers(model: nn.Module) -> None:
        torch.testing.assert_close(model(saved.x), saved.y, rtol=rtol, atol=atol)

    report = assert_hostile_manifests_are_safe(
        build_model, saved.path, Canaries.make(scratch / "canaries"), same_answers, scratch
    )
    assert report.refused > report.cases // 2
    assert "modules[].graphs[].backend.name" not in report.accepted
    return report
