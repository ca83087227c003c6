"""Test matrix: the core alone, each plugin alone, everything together, lint and benchmarks.

Every session installs packages from their own ``pyproject.toml`` (not editable), so a
plugin that forgot its entry-point metadata fails here, and each checks that
``aitune plugins --json`` lists exactly the distributions it installed. torch is pinned
through ``constraints.txt`` to the CPU build these machines carry; on a GPU machine set
``AITUNE_CONSTRAINTS=`` (empty) and bring your own torch, or point it at your own file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False


@dataclass(frozen=True)
class Plugin:
    """A plugin distribution in this repository, and what installing it must list."""

    path: str
    distribution: str
    backends: tuple[str, ...]
    needs: tuple[str, ...] = ()  # other plugins (by key) it depends on
    statuses: tuple[str, ...] = ("loaded",)


PLUGINS: dict[str, Plugin] = {
    "inductor": Plugin("plugins/aitune_inductor", "aitune-inductor", ("inductor_jit", "inductor_aot")),
    "onnx": Plugin("plugins/aitune_onnx", "aitune-onnx", ("onnxruntime",)),
    "torchao": Plugin("plugins/aitune_torchao", "aitune-torchao", ("torchao",)),
    # TensorRT cannot be installed on the CPU machines: there the plugin must install (tensorrt
    # is an extra), be listed unavailable with its reason, and pass its CPU tests.
    "trt": Plugin(
        "plugins/aitune_trt", "aitune-trt", ("tensorrt",), needs=("onnx",), statuses=("unavailable", "loaded")
    ),
    "example": Plugin("examples/aitune_example_backend", "aitune-example-backend", ("example_fx_fuse",)),
}

nox.options.sessions = ["lint", "tests_core", "tests_plugin", "tests_all"]


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


def with_needs(names: list[str]) -> list[str]:
    """Plugin keys in install order, dependencies first."""
    ordered: list[str] = []
    for name in names:
        for need in (*PLUGINS[name].needs, name):
            if need not in ordered:
                ordered.append(need)
    return ordered


_LISTING_CHECK = """
import json, subprocess, sys
expected = json.loads(sys.argv[1])
out = subprocess.run(["aitune", "plugins", "--json"], check=True, capture_output=True, text=True).stdout
found = {p["distribution"]: p for p in json.loads(out)["plugins"]}
if sorted(found) != sorted(expected):
    sys.exit(f"aitune plugins --json listed {sorted(found)}, installed {sorted(expected)}")
for distribution, (backends, statuses) in expected.items():
    record = found[distribution]
    if record["status"] not in statuses or (backends and sorted(record["backends"]) != sorted(backends)) \
            or (record["status"] == "unavailable" and not record["reason"]):
        sys.exit(f"{distribution}: listed {record['status']} {record['backends']} ({record['reason']}), "
                 f"expected {statuses} {backends}")
    print(f"{distribution}: {record['status']}, backends {record['backends']} {record['reason']}".rstrip())
"""


def check_listing(session: nox.Session, names: list[str]) -> None:
    """``aitune plugins --json``, as installed, lists the core and exactly these plugins."""
    expected = {"aitune-core": [["eager"], ["loaded"]]}
    for name in names:
        plugin = PLUGINS[name]
        expected[plugin.distribution] = [list(plugin.backends), list(plugin.statuses)]
    session.run("python", "-c", _LISTING_CHECK, json.dumps(expected))


@nox.session
def tests_core(session: nox.Session) -> None:
    """The core alone, with no plugin installed."""
    install(session, ".", "pytest")
    check_listing(session, [])
    pytest(session, "tests")


@nox.session
@nox.parametrize("name", list(PLUGINS))
def tests_plugin(session: nox.Session, name: str) -> None:
    """The core and one plugin (with the plugins it needs), installed from their pyproject.toml."""
    names = with_needs([name])
    install(session, ".", *(f"./{PLUGINS[n].path}" for n in names), "pytest")
    check_listing(session, names)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", PLUGINS[name].path)


@nox.session
def tests_all(session: nox.Session) -> None:
    """Everything installed together: the core tests, then every plugin's tests."""
    names = with_needs(list(PLUGINS))
    install(session, ".", *(f"./{PLUGINS[n].path}" for n in names), "pytest")
    check_listing(session, names)
    pytest(session, "tests")
    for name in names:
        # One run per plugin: each plugin's conftest is the top-level conftest of its run.
        pytest(session, "--import-mode=importlib", PLUGINS[name].path)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over everything, mypy over the core."""
    install(session, "ruff", "mypy", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "aitune_core")
    session.run("mypy", "aitune_core")


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks, with every plugin installed: ``nox -s bench -- [suite ...] [--threads N]``."""
    names = with_needs(list(PLUGINS))
    install(session, ".", *(f"./{PLUGINS[n].path}" for n in names), "matplotlib")
    session.run("python", "-m", "bench", *session.posargs)


# The Ray executor plugin registers an executor and no backend; its tests start a local
# two-CPU Ray. It stays out of PLUGINS so that tests_all and bench do not pull Ray in.
@nox.session
def tests_plugin_ray(session: nox.Session) -> None:
    """The core and aitune-ray, installed from their pyproject.toml: discovery and the Ray executor tests."""
    install(session, ".", "./plugins/aitune_ray", "pytest")
    expected = {"aitune-core": [["eager"], ["loaded"]], "aitune-ray": [[], ["loaded"]]}
    session.run("python", "-c", _LISTING_CHECK, json.dumps(expected))
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", "plugins/aitune_ray")


nox.options.sessions.append("tests_plugin_ray")
