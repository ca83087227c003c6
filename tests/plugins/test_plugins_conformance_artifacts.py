"""The conformance suite fails backends whose checkpoints would not stand on their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import aitune_core

ROOT = Path(aitune_core.__file__).resolve().parents[1]

BROKEN_BACKENDS = """
import copy

import attrs
import torch

from aitune_core.backends import Backend, BackendConfig
from aitune_core.testing import BackendConformance


@attrs.frozen
class NoConfig(BackendConfig):
    pass


class _Copy(Backend):
    config_class = NoConfig

    def _build(self, context):
        self.runs = copy.deepcopy(context.module)

    def _activate(self):
        self.runs = copy.deepcopy(self.context.module)

    def _deactivate(self):
        self.runs = None

    def _infer(self, *args, **kwargs):
        return self.runs(*args, **kwargs)


class StalePathInExtraState(_Copy):
    '''Keeps its weights in the build folder and remembers the absolute path, not an artifact.'''

    name = "stale_path_in_extra_state"

    @property
    def is_jit(self):
        return True

    def _build(self, context):
        context.cache_dir.mkdir(parents=True, exist_ok=True)
        self.weights = str(context.cache_dir / "weights.pt")
        torch.save(context.module.state_dict(), self.weights)
        super()._build(context)

    def _extra_state(self):
        return {"weights": self.weights}

    def _restore(self, artifacts, extra):
        self.weights = extra["weights"]

    def _activate(self):
        super()._activate()
        self.runs.load_state_dict(torch.load(self.weights, weights_only=True))


class ShipsNothing(_Copy):
    '''Says it needs no module (not JIT), yet restores from the module: nothing is in its checkpoint.'''

    name = "ships_nothing"

    @property
    def is_jit(self):
        return False


class DeclaresAFileItNeverWrites(_Copy):
    name = "declares_a_file_it_never_writes"

    @property
    def is_jit(self):
        return True

    def _artifacts(self):
        return {"engine": self.context.cache_dir / "engine.plan"} if self.context is not None else {}

    def _restore(self, artifacts, extra):
        pass


class TestStalePathInExtraState(BackendConformance):
    def make_backend(self):
        return StalePathInExtraState()


class TestShipsNothing(BackendConformance):
    def make_backend(self):
        return ShipsNothing()


class TestDeclaresAFileItNeverWrites(BackendConformance):
    def make_backend(self):
        return DeclaresAFileItNeverWrites()
"""


@attrs.frozen
class Outcomes:
    """``{test id: "PASSED" or "FAILED"}`` of the run, and its whole output, where failure messages are."""

    by_test: dict[str, str]
    output: str

    def failed(self, cls: str) -> set[str]:
        return {
            name.split("::")[1]
            for name, outcome in self.by_test.items()
            if name.startswith(cls + "::") and outcome == "FAILED"
        }


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the suite on the broken backends once, in a separate pytest process."""
    folder = tmp_path_factory.mktemp("broken-artifacts")
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
    return Outcomes(found, result.stdout)


def test_a_path_into_the_build_folder_in_extra_state_fails(outcomes: Outcomes) -> None:
    assert outcomes.failed("TestStalePathInExtraState") == {
        "test_extra_state_holds_no_build_folder_paths",
        "test_round_trip_then_activate",  # the build folder is gone by then
        "test_round_trip_then_deploy",
        # restored and deployed too
        "test_inference_callable_gives_what_calls_give[min]",
        "test_inference_callable_gives_what_calls_give[opt]",
        "test_inference_callable_gives_what_calls_give[max]",
    }
    assert "StalePathInExtraState._extra_state() holds" in outcomes.output
    assert "a path into its build folder" in outcomes.output


def test_a_backend_that_is_not_jit_and_ships_no_artifacts_fails(outcomes: Outcomes) -> None:
    assert outcomes.failed("TestShipsNothing") == {"test_declared_artifacts_are_shipped"}
    assert "ShipsNothing.is_jit is False, which lets load release the module's weights, but it ships no" in (
        outcomes.output
    )


def test_a_declared_artifact_that_is_not_a_file_fails(outcomes: Outcomes) -> None:
    assert "test_declared_artifacts_are_shipped" in outcomes.failed("TestDeclaresAFileItNeverWrites")
    assert "DeclaresAFileItNeverWrites._artifacts()['engine'] is" in outcomes.output
