"""The core's import graph: no cycles, and nothing below the plugin layer imports it.

Imports are read from the source, function-local ones included (they run too, only
later); imports under ``if TYPE_CHECKING:`` are left out, since they never run. A
module's import of its own package's ``__init__`` is not an edge of its own: Python
runs the package first anyway, and counting it would make every package a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aitune_core

ROOT = Path(aitune_core.__file__).parent
PACKAGE = ROOT.name

ABOVE_PLUGINS = {PACKAGE, f"{PACKAGE}.cli", f"{PACKAGE}.plugins"}
"""Modules that may use the plugin layer: the package's entry points, and the layer itself."""
ABOVE_PLUGINS_PACKAGES = (
    f"{PACKAGE}.plugins.",
    f"{PACKAGE}.plugin_api",
    f"{PACKAGE}.testing",
    f"{PACKAGE}.authoring",
    f"{PACKAGE}.demo",
)


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


class _Imports(ast.NodeVisitor):
    def __init__(self, package: str, known: dict[str, Path]) -> None:
        self.package = package
        self.known = known
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        names = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in self.known]
        if names:
            self.found.update(names)  # ``from package import submodule``: the submodule is what is used
        else:
            self._add(module)

    def _add(self, name: str) -> None:
        while name and name not in self.known:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE):
            self.found.add(name)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        visitor = _Imports(package, known)
        visitor.visit(ast.parse(path.read_text()))
        own_packages = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
        graph[name] = visitor.found - {name} - own_packages
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    details = [
        " -> ".join(c) + "\n    " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c) for c in found
    ]
    assert not found, "import cycles:\n" + "\n".join(details)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_nothing_below_the_plugin_layer_imports_it() -> None:
    """The layers below reach plugins through ``aitune_core.extensions``, filled when a registry is installed."""
    offenders = {
        name: sorted(target for target in targets if target.startswith(f"{PACKAGE}.plugins"))
        for name, targets in import_graph().items()
        if name not in ABOVE_PLUGINS and not name.startswith(ABOVE_PLUGINS_PACKAGES)
    }
    offenders = {name: targets for name, targets in offenders.items() if targets}
    assert not offenders, f"modules below the plugin layer import it: {offenders}"


REPOSITORY = Path(__file__).resolve().parents[2]
FEATURE_DISTRIBUTIONS = {"aitune_jit"}
"""Distributions above the engine (a way of running ``tune``), not backend plugins: they use the core's API."""
BACKEND_PLUGINS = [
    *sorted(p for p in (REPOSITORY / "plugins").glob("aitune_*/aitune_*") if p.name not in FEATURE_DISTRIBUTIONS),
    *sorted((REPOSITORY / "examples").glob("aitune_*/aitune_*")),
]
PLUGIN_SURFACE = (f"{PACKAGE}.plugin_api", f"{PACKAGE}.testing")


def test_shipped_backend_plugins_use_only_the_plugin_api() -> None:
    packages = [path for path in BACKEND_PLUGINS if path.is_dir()]
    assert packages, "no plugin packages found beside the core"
    offenders = []
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
                    module = node.module or ""
                    if not module.startswith(PLUGIN_SURFACE):
                        offenders.append(f"{path.relative_to(REPOSITORY)}:{node.lineno} imports {module}")
                elif isinstance(node, ast.Import):
                    offenders += [
                        f"{path.relative_to(REPOSITORY)}:{node.lineno} imports {alias.name}"
                        for alias in node.names
                        if alias.name.startswith(PACKAGE) and not alias.name.startswith(PLUGIN_SURFACE)
                    ]
    assert not offenders, "plugins import the core's internals:\n" + "\n".join(offenders)


def test_everything_the_plugin_api_offers_exists() -> None:
    import aitune_core.plugin_api as api
    import aitune_core.plugin_api.executors as executors

    missing = [name for module in (api, executors) for name in module.__all__ if not hasattr(module, name)]
    assert not missing


LAYERS = [
    (
        "specs",
        [
            "metadata",
            "graphs",
            "serialization",
            "extensions",
            "names",
            "config",
            "log",
            "third_party_output",
            "context",
            "data",
            "lazy_exports",
            "errors",
            "_version",
        ],
    ),
    ("backend contract", ["backends"]),
    ("evaluating", ["evaluate", "validation", "profiling", "guard", "reporting"]),
    ("choosing", ["strategies", "executors"]),
    ("user-facing", ["tuning", "module", "checkpoint", "inspection", "wrapping", "partition"]),
    ("plugins", ["plugins", "plugin_api"]),
    ("entry points", ["", "cli", "authoring", "testing", "demo"]),
]
"""Bottom first, as drawn in docs/architecture.md; the longest matching prefix decides a module's layer."""


def layer_of(module: str) -> int | None:
    rest = module.removeprefix(PACKAGE).lstrip(".")
    found: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = rest == prefix or (prefix != "" and rest.startswith(f"{prefix}."))
            if matches and (found is None or len(prefix) > found[1]):
                found = (index, len(prefix))
    return found[0] if found is not None else None


def test_every_module_has_a_layer() -> None:
    assert [name for name in modules() if layer_of(name) is None] == []


def test_each_layer_imports_only_the_layers_below() -> None:
    upward = [
        f"{module} ({LAYERS[layer_of(module) or 0][0]}) imports {target} ({LAYERS[layer_of(target) or 0][0]})"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if (layer_of(target) or 0) > (layer_of(module) or 0)
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)
