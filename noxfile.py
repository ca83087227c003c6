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
nox.options.sessions = ["lint", "tests_core"]
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
