"""The conformance suite fails backends that break the contract, each in the test meant for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import aitune_core

ROOT = Path(aitune_core.__file__).resolve().parents[1]

BROKEN_BACKENDS = """
import torch

from aitune_core.backends import TorchEagerBackend
from aitune_core.testing import BackendConformance


class WrongAtLargeBatch(TorchEagerBackend):
    name = "wrong_at_large_batch"

    def _infer(self, x):
        out = super()._infer(x)
        return out + 1 if x.shape[0] > 2 else out


class KeyDependsOnInstance(TorchEagerBackend):
    name = "key_depends_on_instance"

    def key(self):
        return f"eager-{id(self)}"


class BlueprintIsItself(TorchEagerBackend):
    name = "blueprint_is_itself"

    def blueprint(self):
        return self


class ForgetsItsConfig(TorchEagerBackend):
    name = "forgets_its_config"

    def to_dict(self):
        data = super().to_dict()
        data["config"] = {}
        return data


class ScalesTheModule(TorchEagerBackend):
    name = "scales_the_module"

    def _build(self, context):
        with torch.no_grad():
            context.module[0].weight.mul_(2)
        super()._build(context)


class SwitchesTheModuleToTraining(TorchEagerBackend):
    name = "switches_the_module_to_training"

    def _activate(self):
        self.context.module.train()
        super()._activate()


class TestWrongAtLargeBatch(BackendConformance):
    batch_sizes = (1, 4)

    def make_backend(self):
        return WrongAtLargeBatch()


class TestKeyDependsOnInstance(BackendConformance):
    def make_backend(self):
        return KeyDependsOnInstance()


class TestBlueprintIsItself(BackendConformance):
    def make_backend(self):
        return BlueprintIsItself()


class TestForgetsItsConfig(BackendConformance):
    def make_backend(self):
        return ForgetsItsConfig(autocast_dtype=torch.bfloat16)


class TestScalesTheModule(BackendConformance):
    def make_backend(self):
        return ScalesTheModule()


class TestSwitchesTheModuleToTraining(BackendConformance):
    def make_backend(self):
        return SwitchesTheModuleToTraining()
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Run the suite on the broken backends once, in a separate pytest process."""
    folder = tmp_path_factory.mktemp("broken-backends")
    (folder / "test_broken.py").write_text(BROKEN_BACKENDS)
    (folder / "pytest.ini").write_text("[pytest]\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    environ["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "test_broken.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    found = {}
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("PASSED", "FAILED") and "::" in words[1]:
            found[words[1].split("::", 1)[1]] = words[0]
    assert found, result.stdout + result.stderr
    return found


def failed(outcomes: dict[str, str], cls: str) -> set[str]:
    return {name.split("::")[1] for name, outcome in outcomes.items() if name.startswith(cls) and outcome == "FAILED"}


def test_wrong_outputs_fail_only_where_they_are_wrong(outcomes: dict[str, str]) -> None:
    assert failed(outcomes, "TestWrongAtLargeBatch") == {
        "test_matches_eager_at_shape[opt]",
        "test_matches_eager_at_shape[max]",
        "test_legal_lifecycle",
        "test_round_trip_then_activate",
        "test_round_trip_then_deploy",
        "test_blueprint_is_unbuilt",
        # eager's inference_callable is the module itself: routes would serve what calls do not give
        "test_inference_callable_gives_what_calls_give[opt]",
        "test_inference_callable_gives_what_calls_give[max]",
    }
    assert outcomes["TestWrongAtLargeBatch::test_matches_eager_at_shape[min]"] == "PASSED"


def test_unstable_key_fails_the_key_tests(outcomes: dict[str, str]) -> None:
    assert failed(outcomes, "TestKeyDependsOnInstance") == {
        "test_key_is_stable",
        "test_round_trip_then_activate",
        "test_blueprint_is_unbuilt",
    }


def test_built_blueprint_fails(outcomes: dict[str, str]) -> None:
    assert failed(outcomes, "TestBlueprintIsItself") == {"test_blueprint_is_unbuilt"}


def test_lossy_round_trip_fails(outcomes: dict[str, str]) -> None:
    assert failed(outcomes, "TestForgetsItsConfig") == {"test_round_trip_then_activate"}


def test_changing_the_users_module_fails(outcomes: dict[str, str]) -> None:
    assert failed(outcomes, "TestScalesTheModule") == {"test_leaves_the_users_module_untouched"}
    assert failed(outcomes, "TestSwitchesTheModuleToTraining") == {"test_leaves_the_users_module_untouched"}
