"""The architecture is declared as import-linter contracts in ``pyproject.toml``; these tests keep them honest.

``lint-imports`` (the ``lint`` session) checks the contracts. Here: that they hold,
that breaking a layer fails them with the offending chain named, that the plugin
contract lists every internal module, that the lazy export tables are what the
checker reads, that no module is in an import cycle (package ``__init__``s and their
own modules included, which sibling checks leave out), and that function-local
imports stay few and say why.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

grimp = pytest.importorskip(
    "grimp", reason="import-linter (and grimp) come with the test extra: pip install -e .[test]"
)

# The checkout, not the install: nox installs the core into site-packages, where no pyproject.toml is.
REPOSITORY = Path(__file__).resolve().parents[2]
PACKAGE = REPOSITORY / "aitune_core"
PYPROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
LINTER: dict[str, Any] = PYPROJECT["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in LINTER["contracts"]}
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` run in ``folder``, which it puts first on ``sys.path`` (a copy there shadows the install)."""
    command = [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, check=False)


def children() -> set[str]:
    """The modules and packages directly inside ``aitune_core``."""
    return {
        path.stem if path.suffix == ".py" else path.name
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }


def test_the_contracts_hold() -> None:
    result = lint_imports(REPOSITORY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def _ini(contract: dict[str, Any]) -> list[str]:
    lines = [f"[importlinter:contract:{contract['id']}]"]
    for key, value in contract.items():
        if key in ("id", "broken_contract_guidance"):
            continue
        if isinstance(value, list):
            lines += [f"{key} =", *(f"    {item}" for item in value)]
        else:
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    return lines


def test_breaking_a_layer_fails_and_names_the_chain(tmp_path: Path) -> None:
    """A copy of the core whose backend contract imports checkpoint saving, checked with the real contracts."""
    shutil.copytree(PACKAGE, tmp_path / "aitune_core", ignore=shutil.ignore_patterns("__pycache__"))
    config = ["[importlinter]", "root_package = aitune_core"]
    for name in ("layers", "acyclic", "plugin-api-reach", "backend-surface"):
        config += ["", *_ini(CONTRACTS[name])]
    (tmp_path / ".importlinter").write_text("\n".join(config) + "\n")
    kept = lint_imports(tmp_path)
    assert kept.returncode == 0, kept.stdout  # the copy itself is fine: what follows is the bad import's doing

    base = tmp_path / "aitune_core" / "backends" / "base.py"
    lines = base.read_text().splitlines()
    line = next(number for number, text in enumerate(lines, 1) if text.startswith("from aitune_core.backends.state"))
    lines.insert(line, "from aitune_core.checkpoint.save import save  # noqa: F401")
    base.write_text("\n".join(lines) + "\n")
    broken = lint_imports(tmp_path)
    out = " ".join(broken.stdout.split())  # the report wraps long lines
    assert broken.returncode == 1, out
    assert "aitune_core.backends is not allowed to import aitune_core.checkpoint" in out
    assert f"aitune_core.backends.base -> aitune_core.checkpoint.save (l.{line + 1})" in out
    # The plugin API now reaches checkpoints through the backend contract: the chain is named, link by link.
    chain = r"aitune_core\.plugin_api -> aitune_core\.backends\.base \(l\.\d+\) "
    chain += rf"aitune_core\.backends\.base -> aitune_core\.checkpoint\.save \(l\.{line + 1}\)"
    assert re.search(chain, out), out
    assert "No cycles are allowed in aitune_core." in out  # checkpoint saving uses the backends in turn


def test_the_layers_name_every_package_once() -> None:
    contract = CONTRACTS["layers"]
    named = [item.strip("() ") for layer in contract["layers"] for item in layer.replace(":", "|").split("|")]
    assert sorted(named) == sorted(children()) and len(named) == len(set(named))
    assert contract["exhaustive"] is True and contract["containers"] == ["aitune_core"]


FEATURE_DISTRIBUTIONS = {"aitune_jit"}
"""Distributions above the engine (a way of running ``tune``), not backend plugins: they use the core's API."""


def test_plugins_and_their_tests_are_held_to_the_plugin_surface() -> None:
    contract = CONTRACTS["plugins-use-the-plugin-api"]
    allowed = {"plugin_api", "testing"}
    assert sorted(contract["forbidden_modules"]) == sorted(f"aitune_core.{name}" for name in children() - allowed)
    shipped = sorted(
        f"{folder.parent.name}.{folder.name}.{inner}"
        for folder in [*REPOSITORY.glob("plugins/aitune_*"), *REPOSITORY.glob("examples/aitune_*")]
        if folder.name not in FEATURE_DISTRIBUTIONS
        for inner in (folder.name, "tests")
        if (folder / inner).is_dir()
    )
    assert len(shipped) >= 12
    assert sorted(contract["source_modules"]) == shipped
    assert sorted(LINTER["root_packages"]) == sorted(["aitune_core", *shipped])


# --------------------------------------------------------------------------- lazy export tables
def _lazy_tables() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """``(module, _EXPORTS, what its TYPE_CHECKING block imports by name)`` for each module with a lazy table."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        table = next(
            (node for node in tree.body if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "_EXPORTS"),
            None,
        )
        if table is None:
            continue
        exports = ast.literal_eval(table.value) if table.value is not None else {}
        mirror: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                for statement in node.body:
                    if isinstance(statement, ast.ImportFrom):
                        mirror.update({alias.name: statement.module or "" for alias in statement.names})
        parts = path.relative_to(REPOSITORY).with_suffix("").parts
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), exports, mirror))
    return found


def test_every_lazy_table_is_mirrored_for_the_import_checker() -> None:
    """A name handed out on first use is an import like any other: the contracts read the mirror."""
    tables = _lazy_tables()
    assert {name for name, _, _ in tables} >= {"aitune_core", "aitune_core.strategies", "aitune_core.plugins"}
    for name, exports, mirror in tables:
        assert exports == mirror, f"{name}: _EXPORTS and its TYPE_CHECKING imports differ"
        module = __import__(name, fromlist=["_"])
        assert set(exports) <= set(module.__all__) and all(hasattr(module, export) for export in exports), name


# --------------------------------------------------------------------------- cycles
def test_no_module_is_in_an_import_cycle() -> None:
    """Every import, TYPE_CHECKING and function-local ones included, and a package with its own modules."""
    graph = grimp.build_graph("aitune_core", cache_dir=None)
    cycles = [
        f"{importer} -> {imported} -> ... -> {importer}"
        for importer in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if graph.chain_exists(importer=imported, imported=importer)
    ]
    assert cycles == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.build_graph("aitune_core", cache_dir=None)
    graph.add_import(importer="aitune_core.metadata.tables", imported="aitune_core.tuning")
    assert graph.chain_exists(importer="aitune_core.tuning", imported="aitune_core.metadata.tables")


# --------------------------------------------------------------------------- function-local imports
LOCAL_IMPORT_BUDGET = 10


def function_local_imports() -> list[tuple[str, int, str]]:
    """``(file, line, source line)`` of each import of a core module made inside a function."""
    found: set[tuple[str, int, str]] = set()  # a nested function's imports are also its outer function's
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for function in ast.walk(ast.parse(source)):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level:
                    names = ["aitune_core"]
                if any(name.startswith("aitune_core") for name in names):
                    found.add((str(path.relative_to(REPOSITORY)), node.lineno, lines[(node.end_lineno or 1) - 1]))
    return sorted(found)


def test_few_function_local_imports_each_saying_why() -> None:
    """A function-local import hides a dependency from a reader; the few left defer a heavy load, and say so."""
    found = function_local_imports()
    listing = "\n".join(f"{file}:{line}: {text.strip()}" for file, line, text in found)
    assert len(found) <= LOCAL_IMPORT_BUDGET, listing
    assert [entry for entry in found if "  # " not in entry[2]] == [], listing
