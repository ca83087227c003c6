"""``aitune plugins check``: the conformance suite against installed plugins, passing and failing."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

import pytest

from aitune_core.authoring.plugin_check import BackendResult, check, report
from aitune_core.cli import main

pytestmark = pytest.mark.together  # the command loads and checks the installed plugins

BACKEND_SOURCE = """
from typing import Any

import attrs

from aitune_core import hookimpl
from aitune_core.backends import Availability, Backend, BackendConfig

AITUNE_PLUGIN_API = 1


@attrs.frozen
class Config(BackendConfig):
    pass


class FakeBackend(Backend):
    name = "NAME"
    config_class = Config

    @property
    def is_jit(self) -> bool:
        return True

    def _build(self, context: Any) -> None:
        self.module = context.module

    def _activate(self) -> None:
        self.module = self.context.module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)OFFSET

    AVAILABILITY


@hookimpl
def aitune_register_backends():
    return [FakeBackend]
"""


def fake_backend(name: str, offset: str = "", availability: str = "") -> str:
    source = BACKEND_SOURCE.replace("NAME", name).replace("OFFSET", offset)
    return source.replace("AVAILABILITY", availability or "pass")


def run(*args: str) -> Callable[[pytest.CaptureFixture[str]], tuple[int, str, str]]:
    def call(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        status = main(["plugins", "check", *args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return call


def test_eager_passes(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run("eager")(capsys)
    assert status == 0, out
    assert "Checking aitune-core" in out
    row = next(line.split() for line in out.splitlines() if line.startswith("eager "))
    assert row[1] == "PASS" and int(row[2]) >= 25 and row[3] == "0", out
    assert out.strip().endswith("PASS: 1 of 1 backend(s) of aitune-core passed")


def test_the_example_backend_passes(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        importlib.metadata.distribution("aitune-example-backend")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("aitune-example-backend is not installed")
    status, out, _ = run("aitune-example-backend")(capsys)
    assert status == 0, out
    assert "example_fx_fuse  PASS" in out


def test_a_broken_backend_fails_naming_the_tests(aitune_fake_dist: Any, capsys: pytest.CaptureFixture[str]) -> None:
    aitune_fake_dist("aitune-fake-off-by-one", fake_backend("fake_off_by_one", offset=" + 1"))
    status, out, _ = run("aitune-fake-off-by-one")(capsys)
    assert status == 1, out
    row = next(line.split() for line in out.splitlines() if line.startswith("fake_off_by_one "))
    assert row[1] == "FAIL" and int(row[3]) > 0, out
    assert "fake_off_by_one failed:" in out
    assert "test_legal_lifecycle: AssertionError" in out
    assert "test_matches_eager_at_shape[max]" in out
    assert out.strip().endswith("FAIL: 0 of 1 backend(s) of aitune-fake-off-by-one passed")


def test_an_unavailable_backend_is_not_a_pass(aitune_fake_dist: Any, capsys: pytest.CaptureFixture[str]) -> None:
    unavailable = "@classmethod\n    def availability(cls, device):\n        return Availability.no('needs fakelib')"
    aitune_fake_dist("aitune-fake-needs-lib", fake_backend("fake_needs_lib", availability=unavailable))
    status, out, _ = run("fake_needs_lib")(capsys)
    assert status == 1
    assert "SKIP" in out and "needs fakelib" in out and "Running pytest" not in out


def test_unknown_name_lists_what_is_installed(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run("no-such-plugin")(capsys)
    assert status == 2
    assert "no installed plugin or backend is named 'no-such-plugin'" in err
    assert "aitune-core (plugin builtin): eager" in err


def test_a_plugin_without_backends_has_nothing_to_check(
    aitune_fake_dist: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    aitune_fake_dist("aitune-fake-hooks-only", "AITUNE_PLUGIN_API = 1\n")
    status, _, err = run("aitune-fake-hooks-only")(capsys)
    assert status == 1
    assert "registers no backends, so there is nothing to check" in err


def test_a_plugin_that_failed_to_load_says_why(aitune_fake_dist: Any, capsys: pytest.CaptureFixture[str]) -> None:
    aitune_fake_dist("aitune-fake-no-api", "x = 1\n")
    status, _, err = run("aitune-fake-no-api")(capsys)
    assert status == 1
    assert "failed to load" in err and "AITUNE_PLUGIN_API" in err


def test_report_lists_failures_and_reasons() -> None:
    failed = BackendResult("a", passed=3, failed=1, failures=[("test_x", "AssertionError: off")])
    missing = BackendResult("b", unavailable="no CUDA device")
    text = report([failed, missing])
    assert "a failed:\n  test_x: AssertionError: off" in text
    assert "no CUDA device" in text and "--verbose" in text
    assert (failed.status, missing.status, BackendResult("c", passed=1).status) == ("FAIL", "SKIP", "PASS")


def test_check_is_importable_without_the_command_line() -> None:
    assert callable(check)
