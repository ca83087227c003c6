"""``aitune plugins check NAME``: the conformance suite against the backends of an installed plugin.

Whoever installs a plugin (its author before a release, a user before trusting it) can
check it the same way: :class:`~aitune_core.testing.BackendConformance` on each of its
backends, with the default config, on a small MLP, at the tolerances tuning validates
float32 with. The suite is made of pytest tests, so a test module is written to a
temporary folder and pytest runs it in a child process. The child loads the plugin
from its entry point as users' programs do, with ``AITUNE_PLUGINS`` limited to it (so
another installed plugin cannot break or change the check) and ``AITUNE_STRICT_PLUGINS``
on (so a hook that raises fails the check instead of being disabled). A backend that
crashes the interpreter fails its check instead of ending the command.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitune_core.plugins.loader import ALLOW_ENV, BLOCK_ENV, STRICT_ENV, Selection, normalize_name
from aitune_core.plugins.records import PluginRecord, PluginStatus
from aitune_core.plugins.registry import PluginRegistry

SUITE_MODULE = "test_plugin_conformance"
OUTPUT_TAIL = 4000
"""Characters of pytest's output shown when it failed without results to summarise."""

Print = Callable[[str], None]


def _print(text: str) -> None:
    print(text, flush=True)  # seen before a check that runs for minutes, also when piped


class CheckError(Exception):
    """NAME names nothing checkable; the message says what is installed, or why not."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Target:
    """The plugin to check and which of its backends."""

    record: PluginRecord
    backends: list[str]


@dataclass
class BackendResult:
    backend: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)
    """``(test, first line of the error)`` for each failed test."""
    skips: list[str] = field(default_factory=list)
    unavailable: str = ""
    """Why it cannot run on the device; it was not checked then."""

    @property
    def status(self) -> str:
        if self.failed:
            return "FAIL"
        if self.unavailable or not self.passed:
            return "SKIP"
        return "PASS"


# --------------------------------------------------------------------------- which backends
def installed(registry: Any) -> str:
    """What is installed, so that a name that matches nothing is answered with what could have been meant."""
    lines = []
    for record in registry.records():
        detail = ", ".join(record.backends) if record.backends else "(no backends)"
        if record.status is PluginStatus.FAILED:
            detail = f"failed to load: {record.reason}"
        lines.append(f"  {record.distribution} (plugin {record.name}): {detail}")
    return "\n".join(lines)


def resolve(name: str, registry: Any) -> Target:
    """The plugin ``name`` means, and which of its backends.

    Users know a plugin by its distribution (what they installed), by its name in
    ``aitune plugins`` (the entry point) or by a backend name they use in a strategy;
    each of them works, the first two for every backend of the plugin.
    """
    wanted = normalize_name(name)
    records = registry.records()
    matches = [r for r in records if wanted in (normalize_name(r.distribution), normalize_name(r.name))]
    if matches:
        record = matches[0]
        if record.status is PluginStatus.FAILED:
            raise CheckError(f"{record.distribution} (plugin {record.name}) failed to load: {record.reason}")
        if not record.backends:
            raise CheckError(
                f"{record.distribution} (plugin {record.name}) registers no backends, so there is nothing to "
                "check; plugins that only add executors or hooks are tested by their own test suites"
            )
        return Target(record, list(record.backends))
    if name in registry.backend_names():
        return Target(registry.backend_plugin(name), [name])
    raise CheckError(
        f"no installed plugin or backend is named {name!r}. Give a distribution, plugin or backend name; "
        f"installed:\n{installed(registry)}",
        status=2,
    )


# --------------------------------------------------------------------------- the suite
def class_name(index: int, backend: str) -> str:
    """A test class name pytest collects, unique even when two backend names differ only in punctuation."""
    return f"TestConformance{index}_{re.sub(r'[^A-Za-z0-9]+', '_', backend)}"


SUITE_HEAD = '''\
"""Written by `aitune plugins check`: BackendConformance on each backend's default config."""

from aitune_core.plugins import get_backend_class
from aitune_core.testing import BackendConformance


class _DefaultConfig(BackendConformance):
    backend_name = ""
    device = $device

    def make_backend(self):
        return get_backend_class(self.backend_name)()
'''

SUITE_CLASS = """

class $cls(_DefaultConfig):
    backend_name = $backend
    rtol = $rtol
    atol = $atol
"""


def suite_source(checks: list[tuple[str, str, float, float]], device: str) -> str:
    """A test module with one BackendConformance subclass per ``(class, backend, rtol, atol)``.

    The backend is looked up by name in the child, through the plugin registry, so the
    check covers the entry point and registration as users' programs go through them.
    """
    parts = [string.Template(SUITE_HEAD).substitute(device=repr(device))]
    for cls, backend, rtol, atol in checks:
        parts.append(string.Template(SUITE_CLASS).substitute(cls=cls, backend=repr(backend), rtol=rtol, atol=atol))
    return "".join(parts)


CONFTEST = 'pytest_plugins = ["aitune_core.testing"]\n'
PYTEST_INI = """\
[pytest]
filterwarnings =
    ignore::DeprecationWarning
    ignore::FutureWarning
"""


def child_environment(record: PluginRecord, folder: Path) -> dict[str, str]:
    """This process's environment, limited to the plugin under check, importing what this process imports."""
    env = dict(os.environ)
    env.pop(BLOCK_ENV, None)
    env[ALLOW_ENV] = record.distribution
    env[STRICT_ENV] = "1"
    env.setdefault("AITUNE_CACHE_DIR", str(folder / "aitune-cache"))
    # The same import path as here: a plugin found on a path this process was given
    # (PYTHONPATH, a development folder) is found there too.
    paths = [entry or os.getcwd() for entry in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def summarize(junit: Path, classes: dict[str, str]) -> tuple[dict[str, BackendResult], list[str]]:
    """Results by backend from pytest's JUnit XML, and errors that belong to no backend (collection)."""
    results = {backend: BackendResult(backend) for backend in classes.values()}
    stray = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        owner = case.get("classname", "").rsplit(".", 1)[-1]
        test = case.get("name", "")
        backend = classes.get(owner)
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if backend is None:
            if problem is not None:
                stray.append(f"{test}: {_first_line(problem)}")
            continue
        result = results[backend]
        result.seconds += float(case.get("time", "0") or 0)
        skipped = case.find("skipped")
        if problem is not None:
            result.failed += 1
            result.failures.append((test, _first_line(problem)))
        elif skipped is not None:
            result.skipped += 1
            result.skips.append(f"{test}: {skipped.get('message', '')}")
        else:
            result.passed += 1
    return results, stray


def _first_line(element: ElementTree.Element, limit: int = 300) -> str:
    text = element.get("message") or element.text or ""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --------------------------------------------------------------------------- the command
def check(name: str, device: str = "cpu", verbose: bool = False, out: Print = _print) -> int:
    """Check the plugin or backend ``name``; 0 when every backend passed, 1 otherwise, 2 for an unknown name."""
    import torch

    # Every installed plugin, whatever AITUNE_PLUGINS says: a disabled plugin can still be checked.
    registry = PluginRegistry.load(strict=False, selection=Selection())
    try:
        target = resolve(name, registry)
    except CheckError as error:
        print(f"aitune plugins check: {error}", file=sys.stderr)
        return error.status
    record = target.record
    results: dict[str, BackendResult] = {}
    checks: list[tuple[str, str, float, float]] = []
    for backend in target.backends:
        cls = registry.backend_class(backend)
        try:
            availability = cls.availability(torch.device(device))
            if availability.available:
                tolerance = cls().default_tolerances().for_dtype(torch.float32)
        except Exception as error:  # the plugin's code: a failure of the check, not of the command
            result = BackendResult(backend, failed=1)
            result.failures.append(("default config", f"{cls.__name__}() or its availability raised {error!r}"))
            results[backend] = result
            continue
        if not availability.available:
            results[backend] = BackendResult(backend, unavailable=availability.reason or "unavailable")
            continue
        checks.append((class_name(len(checks), backend), backend, tolerance.rtol, tolerance.atol))
    out(
        f"Checking {record.distribution} {record.version} (plugin {record.name}): BackendConformance on {device}, "
        "each backend's default config, a small MLP, tuning's float32 tolerances"
    )
    stray: list[str] = []
    trouble = ""
    if checks:
        names = ", ".join(backend for _, backend, _, _ in checks)
        out(f"Running pytest on {names}; backends that compile may take minutes")
        suite, stray, trouble = run_suite(record, checks, device, verbose)
        results.update(suite)
    ordered = [results[backend] for backend in target.backends if backend in results]
    out(report(ordered))
    if stray:
        out("Errors outside the backends' tests:\n" + "\n".join(f"  {line}" for line in stray))
    if trouble:
        out(trouble)
    passed = sum(result.status == "PASS" for result in ordered)
    verdict = "PASS" if passed == len(ordered) and not stray and not trouble else "FAIL"
    out(f"{verdict}: {passed} of {len(ordered)} backend(s) of {record.distribution} passed")
    return 0 if verdict == "PASS" else 1


def run_suite(
    record: PluginRecord, checks: list[tuple[str, str, float, float]], device: str, verbose: bool
) -> tuple[dict[str, BackendResult], list[str], str]:
    """Run the suite with pytest in a child process.

    Returns the results by backend, errors that belong to no backend (a module that did
    not import), and, when pytest itself was in trouble (an exit status that is not a
    verdict, or no results written), what it said.
    """
    folder = Path(tempfile.mkdtemp(prefix="aitune-plugin-check-"))
    try:
        suite = folder / f"{SUITE_MODULE}.py"
        suite.write_text(suite_source(checks, device))
        (folder / "conftest.py").write_text(CONFTEST)
        (folder / "pytest.ini").write_text(PYTEST_INI)
        junit = folder / "results.xml"
        command = [sys.executable, "-m", "pytest", str(suite), "-c", str(folder / "pytest.ini")]
        command += ["--rootdir", str(folder), "--basetemp", str(folder / "tmp"), "-p", "no:cacheprovider"]
        command += ["--junitxml", str(junit), "-v" if verbose else "-q"]
        completed = subprocess.run(
            command,
            cwd=folder,
            env=child_environment(record, folder),
            stdout=None if verbose else subprocess.PIPE,
            stderr=None if verbose else subprocess.STDOUT,
            text=True,
        )
        said = "(its output is above)" if verbose else f"and said:\n{(completed.stdout or '')[-OUTPUT_TAIL:]}"
        trouble = f"pytest exited with status {completed.returncode} {said}"
        if not junit.is_file():
            return {}, [], trouble
        results, stray = summarize(junit, {cls: backend for cls, backend, _, _ in checks})
        # 0: every test passed, 1: some failed; anything else is pytest's own trouble.
        return results, stray, "" if completed.returncode in (0, 1) else trouble
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(results: list[BackendResult]) -> str:
    """The summary table, then each failure and why a backend was not checked."""
    from tabulate import tabulate

    rows = [[r.backend, r.status, r.passed, r.failed, r.skipped, f"{r.seconds:.1f}"] for r in results]
    headers = ["Backend", "Result", "Passed", "Failed", "Skipped", "Seconds"]
    widths: list[int | None] = [None] * len(headers)
    if any(r.unavailable for r in results):
        rows = [[*row, r.unavailable] for row, r in zip(rows, results, strict=True)]
        headers.append("Not checked because")
        widths.append(60)
    lines = ["", tabulate(rows, headers=headers, tablefmt="simple", maxcolwidths=widths)]
    for result in results:
        if result.failures:
            lines += ["", f"{result.backend} failed:"]
            lines += [f"  {test}: {message}" for test, message in result.failures]
        elif result.status == "SKIP" and not result.unavailable:
            lines += ["", f"{result.backend}: every test was skipped:"]
            lines += [f"  {line}" for line in result.skips[:5]]
    if any(r.failures for r in results):
        lines += ["", "Rerun with --verbose for pytest's full output."]
    lines.append("")
    return "\n".join(lines)
