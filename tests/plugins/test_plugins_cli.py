"""``aitune plugins``, run as users run it: a new process that discovers installed plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aitune_core

pytestmark = pytest.mark.together  # the listing holds the installed plugins beside the fake ones

FAKE_DISTS = Path(__file__).parent / "fake_dists"
ROOT = Path(aitune_core.__file__).resolve().parents[1]


def ours(plugins: list[dict[str, object]]) -> list[dict[str, object]]:
    """The built-in plugin and the fake ones; other plugins installed in the environment are ignored."""
    return [p for p in plugins if p["builtin"] or str(p["distribution"]).startswith("aitune-fake-")]


def run_cli(*args: str, dists: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    environ["PYTHONPATH"] = os.pathsep.join([*(str(FAKE_DISTS / d) for d in dists), str(ROOT)])
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "plugins", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def test_json_lists_every_plugin_with_status() -> None:
    result = run_cli("--json", dists=["good", "import_error", "unavailable"])
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["plugin_api"] == 1
    rows = {(p["name"], p["distribution"], p["version"], p["status"]) for p in ours(payload["plugins"])}
    assert rows == {
        ("builtin", "aitune-core", aitune_core.__version__, "loaded"),
        ("good", "aitune-fake-good", "1.0", "loaded"),
        ("import_error", "aitune-fake-import-error", "0.3", "failed"),
        ("unavailable", "aitune-fake-unavailable", "1.0", "unavailable"),
    }
    by_name = {p["name"]: p for p in ours(payload["plugins"])}
    assert by_name["good"]["backends"] == ["fake_good"]
    assert by_name["builtin"]["backends"] == ["eager", "partition"]
    assert "aitune_fake_missing_dependency" in by_name["import_error"]["reason"]
    assert by_name["unavailable"]["reason"] == "fake_needs_fakelib: fakelib not importable"
    assert "plugin failed to load" in result.stderr, "the failure is also logged"


def test_table_works_when_every_plugin_is_broken() -> None:
    result = run_cli(dists=["import_error", "register_error", "too_new", "unknown_hook", "duplicate"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["Name", "Distribution", "Version", "Status", "Reason", "Backends", "Targets"]
    rows = [line.split() for line in lines[2:] if line.split() and not line.startswith(" ")]
    statuses = {row[0]: row[3] for row in rows if row[1] == "aitune-core" or row[1].startswith("aitune-fake-")}
    assert statuses == {
        "builtin": "loaded",
        "import_error": "failed",
        "register_error": "failed",
        "too_new": "failed",
        "unknown_hook": "failed",
        "dup_a": "failed",
        "dup_b": "failed",
    }
    assert "registration failed: RuntimeError: license server unreachable" in " ".join(result.stdout.split())


def test_strict_mode_still_lists_but_exits_with_1() -> None:
    result = run_cli("--json", dists=["import_error"], env={"AITUNE_STRICT_PLUGINS": "1"})
    assert result.returncode == 1
    assert [p["status"] for p in ours(json.loads(result.stdout)["plugins"])] == ["loaded", "failed"]
