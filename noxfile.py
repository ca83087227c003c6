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
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nox
import nox.command

ROOT = Path(__file__).parent
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False


@dataclass(frozen=True)
class Plugin:
    """A plugin distribution in this repository, read from its ``pyproject.toml``.

    ``[tool.aitune.nox]`` says what installing it must list (``backends``, and the
    ``statuses`` it may have, e.g. ``["unavailable", "loaded"]`` where its library
    cannot be installed here), and ``together = false`` keeps a heavy plugin out of
    the all-together session. The plugins it needs are its dependencies that are
    plugins of this repository.
    """

    key: str
    path: str
    distribution: str
    package: str
    backends: tuple[str, ...]
    needs: tuple[str, ...]
    statuses: tuple[str, ...]
    together: bool
    extras: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """What pip installs: the folder, with the extras its tests need (``[tool.aitune.nox] extras``)."""
        return f"./{self.path}[{','.join(self.extras)}]" if self.extras else f"./{self.path}"


def discover() -> dict[str, Plugin]:
    """Every ``plugins/*/pyproject.toml`` and ``examples/*/pyproject.toml`` that declares an aitune plugin."""
    found: dict[str, dict] = {}
    for pyproject in sorted([*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/*/pyproject.toml")]):
        data = tomllib.loads(pyproject.read_text())
        project = data.get("project", {})
        if "aitune.plugins" not in project.get("entry-points", {}):
            continue
        found[project["name"]] = {"folder": pyproject.parent, "project": project, "data": data}
    plugins: dict[str, Plugin] = {}
    for distribution, item in found.items():
        settings = item["data"].get("tool", {}).get("aitune", {}).get("nox", {})
        requirements = [_requirement_name(r) for r in item["project"].get("dependencies", [])]
        key = distribution.removeprefix("aitune-")
        plugins[key] = Plugin(
            key=key,
            path=str(item["folder"].relative_to(ROOT)),
            distribution=distribution,
            package=distribution.replace("-", "_"),
            backends=tuple(settings.get("backends", ())),
            needs=tuple(r.removeprefix("aitune-") for r in requirements if r in found),
            statuses=tuple(settings.get("statuses", ("loaded",))),
            together=bool(settings.get("together", True)),
            extras=tuple(settings.get("extras", ())),
        )
    return plugins


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


PLUGINS = discover()
TOGETHER = [key for key, plugin in PLUGINS.items() if plugin.together]

nox.options.sessions = ["lint", "tests_core", "tests_plugin", "tests_all"]


def constraints(default: Path = ROOT / "constraints.txt") -> list[str]:
    """``-c`` with ``AITUNE_CONSTRAINTS`` where it is set (empty: none), else with ``default``."""
    path = os.environ.get("AITUNE_CONSTRAINTS", str(default))
    return ["-c", path] if path else []


# A download cut off half way (a 59 MB wheel at 16 MB, seen in CI) is resumed and, past
# pip's own retries, the whole install is tried again: the registry, not the code, failed.
PIP_PATIENCE = {"PIP_RETRIES": "10", "PIP_RESUME_RETRIES": "20", "PIP_TIMEOUT": "60"}
INSTALL_TRIES = 3


def install(session: nox.Session, *targets: str, default: Path = ROOT / "constraints.txt") -> None:
    for attempt in range(1, INSTALL_TRIES + 1):
        try:
            session.install(*constraints(default), *targets, env=PIP_PATIENCE)
            return
        except nox.command.CommandFailed:
            if attempt == INSTALL_TRIES:
                raise
            session.warn(f"pip install failed (try {attempt} of {INSTALL_TRIES}); trying again")


INDUCTOR_CACHE = ROOT / ".nox" / "inductor-cache"
"""One Inductor cache for every session, and for the next run: what one session compiled, the
next reuses. Sharing it between virtualenvs is safe: Inductor keys a compiled graph on torch's
version and the hash of its source files, and a C++ kernel on its source and full compiler
command (which names the virtualenv's torch headers), so another torch, or another venv's
headers, only misses. Tests that need a cold cache make their own."""


NO_TESTS_COLLECTED = 5
"""pytest's exit status when its marks select no test."""


def pytest(session: nox.Session, *paths: str, env: dict[str, str] | None = None, allow_none: bool = False) -> None:
    """pytest with the run-wide Inductor cache; ``allow_none``: a run whose marks select no test passes."""
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(INDUCTOR_CACHE),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
        **(env or {}),
    }
    codes = [0, NO_TESTS_COLLECTED] if allow_none else [0]
    session.run("pytest", "-q", "-p", "no:cacheprovider", *paths, *session.posargs, env=env, success_codes=codes)


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
    expected = {"aitune-core": [["eager", "partition"], ["loaded"]]}
    for name in names:
        plugin = PLUGINS[name]
        expected[plugin.distribution] = [list(plugin.backends), list(plugin.statuses)]
    session.run("python", "-c", _LISTING_CHECK, json.dumps(expected))


_NO_STARTUP_HOOK = """
import site, sys
from pathlib import Path
found = [str(p) for folder in site.getsitepackages() for p in Path(folder).glob("aitune_jit*.pth")]
if found:
    sys.exit(f"the core alone installed a JIT start-up hook: {found}; it belongs to aitune-jit")
print("no JIT start-up hook: it comes with aitune-jit only")
"""


@nox.session
def tests_core(session: nox.Session) -> None:
    """The core alone, with no plugin installed (and no JIT start-up hook in site-packages)."""
    install(session, ".[test]")
    check_listing(session, [])
    session.run("python", "-c", _NO_STARTUP_HOOK)
    pytest(session, "tests")


@nox.session
@nox.parametrize("name", list(PLUGINS))
def tests_plugin(session: nox.Session, name: str) -> None:
    """The core and one plugin (with the plugins it needs), installed from their pyproject.toml."""
    names = with_needs([name])
    install(session, ".", *(PLUGINS[n].target for n in names), "pytest")
    check_listing(session, names)
    # importlib mode: the tests import the installed plugin, not the source folder beside them.
    pytest(session, "--import-mode=importlib", PLUGINS[name].path)


TOGETHER_MARKS = ["-m", "together"]
"""What the all-together session runs again: the tests marked ``together``, whose verdict
depends on what is installed beside the code they test. They list, load or check the
installed plugins (``aitune plugins``, ``aitune plugins check``), take every plugin's
default candidates, start an interpreter whose imports or log other distributions change,
or need another plugin beside their own (aitune-jit's demo and aitune-transformers'
generation tests compile with aitune-inductor, so this is the one session where they run).
Every other test checks the core, or one plugin with the plugins it needs, whatever else
is installed, and runs once: in ``tests_core`` or in its plugin's ``tests_plugin``. Where
a code path depends on a plugin's hook (a graph-key part, say), the core's tests give it
one of their own (a fake plugin, or the function itself), so they need no plugin installed.
A new test that reaches the installed set gets ``@pytest.mark.together``; a plugin whose
tests use the mark declares it in its ``[tool.pytest.ini_options] markers``."""


@nox.session
def tests_all(session: nox.Session) -> None:
    """Everything installed together: the ``together`` tests of the core, then of every plugin (one run each)."""
    names = with_needs(TOGETHER)
    install(session, ".[test]", *(PLUGINS[n].target for n in names))
    check_listing(session, names)
    for name in names:
        # One run per plugin: each plugin's conftest is the top-level conftest of its run. A plugin
        # with no together test still has its tests imported beside every other plugin.
        pytest(session, "--import-mode=importlib", PLUGINS[name].path, *TOGETHER_MARKS, allow_none=True)
    # The core's last: a run ends on tests that ran, not on a plugin whose marks selected none.
    pytest(session, "tests", *TOGETHER_MARKS)


MODELS_PLUGINS = ["transformers", "inductor", "onnx", "openvino"]


@nox.session
def tests_models(session: nox.Session) -> None:
    """Real architectures through tune, probes against eager, fallback, save and a fresh-process load.

    timm's resnet18 and ViT, BERT, T5's encoder and GPT-2 (a greedy loop over its KV
    cache, and without it), each from a tiny config with random weights: nothing comes
    from a hub. Not a default session: it installs timm, transformers and torch with
    torchvision (several GB, pinned by ``constraints-models.txt``, which says why), and
    compiles for minutes. ``AITUNE_CONSTRAINTS`` replaces that file as for every session.
    """
    names = with_needs(MODELS_PLUGINS)
    install(
        session,
        ".",
        *(PLUGINS[n].target for n in names),
        "timm",
        "transformers",
        "pytest",
        default=ROOT / "constraints-models.txt",
    )
    check_listing(session, names)
    pytest(session, "tests_models", env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})


MYPY_CACHE = ROOT / ".nox" / "mypy-cache"
"""One mypy cache for the core's run and every plugin's: a plugin's run reads the analysis of
torch and the core that the runs before it wrote, instead of redoing it (13 to 15 s a plugin
here, 1 to 3 s with the cache). mypy checks each cached module against its file's hash, so
whatever changed is analysed again."""


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over everything, the import contracts, mypy over the core and over every plugin (each from its folder).

    The import contracts (``[tool.importlinter]`` in pyproject.toml) read the plugins and their tests from
    this checkout's folders, whichever of them are installed.
    """
    names = with_needs(TOGETHER)
    install(session, "ruff", "mypy", "import-linter", ".", *(PLUGINS[n].target for n in names))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "aitune_core")
    session.run("lint-imports", "--no-cache")
    session.run("mypy", "--cache-dir", str(MYPY_CACHE), "aitune_core")
    apart = [key for key in PLUGINS if key not in names]  # type-checked without their heavy libraries
    if apart:
        session.install("--no-deps", *(f"./{PLUGINS[key].path}" for key in apart))
    for key in [*names, *apart]:
        plugin = PLUGINS[key]
        with session.chdir(plugin.path):
            config = str(ROOT / "pyproject.toml")
            session.run("mypy", "--config-file", config, "--cache-dir", str(MYPY_CACHE), "-p", plugin.package)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks, with every plugin installed: ``nox -s bench -- [suite ...] [--threads N]``."""
    names = with_needs(TOGETHER)
    install(session, ".", *(PLUGINS[n].target for n in names), "matplotlib")
    session.run("python", "-m", "bench", *session.posargs)
