"""Test matrix: the core alone, each plugin alone, everything together, lint and benchmarks.

Every session installs packages from their own ``pyproject.toml`` (not only editable),
so a plugin that forgot its entry-point metadata fails here. torch is pinned through
``constraints.txt`` to the CPU build these machines carry; on a GPU machine set
``AITUNE_CONSTRAINTS=`` (empty) and install your own torch into the session first, or
point it at your own constraints file.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.sessions = ["lint", "tests_core", "tests_example_plugin"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False


def constraints() -> list[str]:
    path = os.environ.get("AITUNE_CONSTRAINTS", str(ROOT / "constraints.txt"))
    return ["-c", path] if path else []


def install(session: nox.Session, *targets: str) -> None:
    session.install(*constraints(), *targets)


def pytest(session: nox.Session, *paths: str) -> None:
    # One Inductor cache per session: compiles done by one test are reused by the next.
    cache = Path(session.create_tmp()) / "inductor-cache"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    session.run("pytest", "-q", "-p", "no:cacheprovider", *paths, *session.posargs, env=env)


@nox.session
def tests_core(session: nox.Session) -> None:
    """The core alone, with no plugin installed."""
    install(session, ".", "pytest")
    pytest(session, "tests")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over everything, mypy over the core."""
    install(session, "ruff", "mypy", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "aitune_core")
    session.run("mypy", "aitune_core")


# Runs `aitune plugins --json` as installed (the console script, not the source tree) and
# checks that it lists the built-in plugin and the example, loaded, and nothing else.
_EXAMPLE_LISTING_CHECK = """
import json, subprocess, sys
out = subprocess.run(["aitune", "plugins", "--json"], check=True, capture_output=True, text=True).stdout
found = sorted((p["distribution"], p["name"], p["status"]) for p in json.loads(out)["plugins"])
expected = [("aitune-core", "builtin", "loaded"), ("aitune-example-backend", "example_fx_fuse", "loaded")]
if found != expected:
    sys.exit(f"aitune plugins --json listed {found}, expected {expected}")
print("aitune plugins --json lists", found)
"""


@nox.session
def tests_example_plugin(session: nox.Session) -> None:
    """The example plugin installed from its own pyproject.toml, next to the core: its tests and discovery."""
    install(session, ".", "./examples/aitune_example_backend", "pytest")
    session.run("python", "-c", _EXAMPLE_LISTING_CHECK)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", "examples/aitune_example_backend")


# `aitune plugins --json` as installed must list the inductor plugin with both backends
# (unavailable, with the reason, is accepted on a machine without a C++ compiler).
_INDUCTOR_LISTING_CHECK = """
import json, subprocess, sys
out = subprocess.run(["aitune", "plugins", "--json"], check=True, capture_output=True, text=True).stdout
found = [p for p in json.loads(out)["plugins"] if p["distribution"] == "aitune-inductor"]
if len(found) != 1 or found[0]["backends"] != ["inductor_jit", "inductor_aot"] \\
        or found[0]["status"] not in ("loaded", "unavailable"):
    sys.exit(f"aitune plugins --json listed {found} for aitune-inductor")
print("aitune plugins --json lists", found[0]["name"], found[0]["status"], found[0]["backends"], found[0]["reason"])
"""


@nox.session
def tests_plugin_inductor(session: nox.Session) -> None:
    """The inductor plugin installed from its own pyproject.toml, next to the core: discovery and its tests."""
    install(session, ".", "./plugins/aitune_inductor", "pytest")
    session.run("python", "-c", _INDUCTOR_LISTING_CHECK)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", "plugins/aitune_inductor")


nox.options.sessions.append("tests_plugin_inductor")


# `aitune plugins --json` as installed must list the onnx plugin with its backend (unavailable,
# with the reason, is accepted on a CUDA machine whose onnxruntime build has no CUDA provider).
_ONNX_LISTING_CHECK = """
import json, subprocess, sys
out = subprocess.run(["aitune", "plugins", "--json"], check=True, capture_output=True, text=True).stdout
found = [p for p in json.loads(out)["plugins"] if p["distribution"] == "aitune-onnx"]
if len(found) != 1 or found[0]["backends"] != ["onnxruntime"] or found[0]["status"] not in ("loaded", "unavailable"):
    sys.exit(f"aitune plugins --json listed {found} for aitune-onnx")
print("aitune plugins --json lists", found[0]["name"], found[0]["status"], found[0]["backends"], found[0]["reason"])
"""


@nox.session
def tests_plugin_onnx(session: nox.Session) -> None:
    """The onnx plugin installed from its own pyproject.toml, next to the core: discovery and its tests."""
    install(session, ".", "./plugins/aitune_onnx", "pytest")
    session.run("python", "-c", _ONNX_LISTING_CHECK)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", "plugins/aitune_onnx")


nox.options.sessions.append("tests_plugin_onnx")


# `aitune plugins --json --candidates` as installed must list the torchao plugin, loaded, and
# one default candidate per preset; every unavailable preset must say why (on a CPU machine:
# int8wo and int8dq run, the float8/int4/MX/NVFP4 presets name the GPU they need).
_TORCHAO_LISTING_CHECK = """
import json, subprocess, sys
out = subprocess.run(["aitune", "plugins", "--json", "--candidates"], check=True, capture_output=True, text=True).stdout
payload = json.loads(out)
found = [p for p in payload["plugins"] if p["distribution"] == "aitune-torchao"]
if len(found) != 1 or found[0]["backends"] != ["torchao"] or found[0]["status"] != "loaded":
    sys.exit(f"aitune plugins --json listed {found} for aitune-torchao")
presets = [c for c in payload["candidates"] if c["plugin"] == "aitune-torchao"]
if len(presets) < 5 or any(not c["available"] and not c["reason"] for c in presets):
    sys.exit(f"aitune plugins --candidates listed {presets} for aitune-torchao")
if payload["device"] == "cpu" and [c["backend"] for c in presets if c["available"]] != [
        "TorchAOBackend(preset='int8wo')", "TorchAOBackend(preset='int8dq')"]:
    sys.exit(f"on the CPU only the int8 presets should run: {presets}")
for c in presets:
    print(f"{c['backend']:36} {'available' if c['available'] else c['reason']}")
"""


@nox.session
def tests_plugin_torchao(session: nox.Session) -> None:
    """The torchao plugin installed from its own pyproject.toml, next to the core (torchao comes as its
    dependency): discovery, the presets' availability, and its tests."""
    install(session, ".", "./plugins/aitune_torchao", "pytest")
    session.run("python", "-c", _TORCHAO_LISTING_CHECK)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", "plugins/aitune_torchao")


nox.options.sessions.append("tests_plugin_torchao")
