"""``aitune new-plugin NAME``: a plugin project that works before its author changes it.

An author who starts from a project that installs, is discovered and passes the
conformance suite changes one thing at a time against a green suite, instead of
debugging packaging, entry points and the backend contract all at once.

Names. ``NAME`` is the distribution name and the folder: lowercase letters, digits and
single dashes, starting with a letter. The import package is ``NAME`` with dashes as
underscores. The plugin's entry-point name and its backend's name are the package name
without a leading ``aitune_``, since inside aitune the prefix says nothing::

    demo-x         distribution demo-x,         package demo_x,         backend demo_x
    aitune-demo-x  distribution aitune-demo-x,  package aitune_demo_x,  backend demo_x

The class names are the backend name in CamelCase (``DemoXBackend``, ``DemoXConfig``),
unless the author gives the prefix (``--class-name OpenVINO`` for a product whose name
has its own capitals).

The project's files are :class:`string.Template` texts under ``template/`` (package
data): placeholders such as ``$package`` and ``${cls}`` are filled in by :func:`render`,
and a literal dollar sign is ``$$``. Only the standard library and aitune-core's
version are used here: generating a project loads no plugin and imports nothing of
torch's beyond what ``aitune_core`` already has.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import json
import keyword
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path

from aitune_core._version import __version__

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
CLASS_PATTERN = re.compile(r"[A-Z][A-Za-z0-9]*")
MAX_NAME_LENGTH = 40
"""Longer names would push the generated code past its 120-character lines."""
CORE_DISTRIBUTION = "aitune-core"
RESERVED_NAMES = frozenset({"aitune", CORE_DISTRIBUTION, "tests"})
"""Names whose package would shadow aitune itself or the project's own tests folder."""
RESERVED_BACKENDS = frozenset({"eager"})
"""Backend names the built-in plugin holds."""


class NewPluginError(ValueError):
    """A name or a target folder that cannot be used; the message says what to do instead."""


@dataclass(frozen=True)
class PluginNames:
    """The names a plugin project uses, all derived from the one its author gives."""

    distribution: str
    package: str
    plugin: str
    """The entry-point name and the backend name."""
    cls: str
    """The class-name prefix: ``DemoX`` for ``DemoXBackend`` and ``DemoXConfig``."""

    @classmethod
    def from_name(cls, name: str, class_name: str | None = None) -> PluginNames:
        package = name.replace("-", "_")
        plugin = package.removeprefix("aitune_") or package
        prefix = class_name or "".join(part[:1].upper() + part[1:] for part in plugin.split("_"))
        return cls(distribution=name, package=package, plugin=plugin, cls=prefix)


def suggest(name: str) -> str:
    """A valid name close to ``name``, for the error message; empty when there is none."""
    text = re.sub(r"[^a-z0-9]+", "-", name.strip().lower())
    text = re.sub(r"^[^a-z]+", "", text).strip("-")
    return text if NAME_PATTERN.fullmatch(text) else ""


def check_name(name: str, class_name: str | None = None) -> PluginNames:
    """The names for ``name`` and the class-name prefix, or a :class:`NewPluginError` that says how to fix it."""
    if class_name is not None and (
        not CLASS_PATTERN.fullmatch(class_name) or class_name.endswith(("Backend", "Config"))
    ):
        raise NewPluginError(
            f"{class_name!r} is not a class-name prefix: use letters and digits starting with a capital, without "
            "'Backend' or 'Config' at the end (they are added), e.g. 'OpenVINO' for OpenVINOBackend and OpenVINOConfig"
        )
    if not NAME_PATTERN.fullmatch(name):
        close = suggest(name)
        hint = f", e.g. {close!r}" if close and close != name else ""
        raise NewPluginError(
            f"{name!r} is not a valid plugin name: use lowercase letters, digits and single dashes, "
            f"starting with a letter{hint}"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise NewPluginError(f"{name!r} is {len(name)} characters long; use at most {MAX_NAME_LENGTH}")
    names = PluginNames.from_name(name, class_name)
    if name in RESERVED_NAMES or names.plugin in RESERVED_BACKENDS:
        raise NewPluginError(f"{name!r} is taken by aitune itself; choose another name, e.g. '{name}-backend'")
    if keyword.iskeyword(names.package) or not names.package.isidentifier():
        raise NewPluginError(f"{name!r} would make the package {names.package!r}, a Python keyword; add a word to it")
    if names.package in sys.stdlib_module_names:
        raise NewPluginError(
            f"{name!r} would make the package {names.package!r}, which shadows the standard library module of "
            f"that name; choose another name, e.g. 'aitune-{name}'"
        )
    spec = importlib.util.find_spec(names.package)
    if spec is not None:
        where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "this environment"
        raise NewPluginError(
            f"{name!r} would make the package {names.package!r}, which is already importable here ({where}); "
            f"choose another name, e.g. 'aitune-{name}'"
        )
    return names


def source_checkout() -> Path | None:
    """The aitune-core source checkout this code runs from, or None for an installed release.

    A project generated from a checkout is tested against that checkout by default: the
    author is then working on both, and the release on the package index may predate
    what the checkout offers.
    """
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or not (root / "aitune_core" / "__init__.py").is_file():
        return None
    if not re.search(r'^name\s*=\s*"aitune-core"', pyproject.read_text(encoding="utf-8"), re.MULTILINE):
        return None
    return root


def torch_seen() -> str:
    """The installed torch's version, read from its metadata: importing it is not needed for that."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


def torch_pin(version: str) -> str:
    """``torch==X.Y.Z`` without the local label (``+cpu``), which only special indexes serve."""
    if not version:
        return "# torch was not installed when this file was written: add a pin such as torch==2.6.0"
    return f"torch=={version.split('+', 1)[0]}"


def render(
    names: PluginNames,
    *,
    core_version: str = __version__,
    checkout: Path | None = None,
    torch_version: str = "",
) -> dict[str, str]:
    """Every file of the project, by path relative to its folder, without touching the disk.

    Kept apart from writing so that what a project would hold can be checked for any
    checkout and torch version, not only the ones this process has.
    """
    values = {
        "distribution": names.distribution,
        "package": names.package,
        "plugin": names.plugin,
        "cls": names.cls,
        "core_requirement": f"{CORE_DISTRIBUTION}>={core_version}",
        "source_checkout": json.dumps(str(checkout)) if checkout is not None else "None",
        "torch_seen": torch_version or "none",
        "torch_pin": torch_pin(torch_version),
    }
    files = {
        "pyproject.toml": "pyproject.toml",
        "README.md": "README.md",
        "noxfile.py": "noxfile.py",
        "constraints.txt": "constraints.txt",
        "conftest.py": "conftest.py",
        ".gitignore": "gitignore",
        f"{names.package}/__init__.py": "__init__.py",
        f"{names.package}/backend.py": "backend.py",
        f"{names.package}/plugin.py": "plugin.py",
        f"{names.package}/py.typed": "py.typed",
        f"tests/test_{names.package}.py": "test.py",
    }
    return {path: string.Template(template(name)).substitute(values) for path, name in files.items()}


def template(name: str) -> str:
    """The text of ``template/<name>.tmpl``; the suffix keeps tools from taking them for the core's own files."""
    return (importlib.resources.files(__package__) / "template" / f"{name}.tmpl").read_text(encoding="utf-8")


def check_target(target: Path) -> None:
    """Refuse to write into a folder that holds anything: a generator must never overwrite work."""
    if target.is_file() or (target.exists() and not target.is_dir()):
        raise NewPluginError(f"{target} exists and is not a folder; choose another name, or --path for elsewhere")
    if target.is_dir() and any(target.iterdir()):
        raise NewPluginError(
            f"{target} exists and is not empty; choose another name, pass --path to write it elsewhere, "
            "or remove the folder"
        )


def write_plugin(
    name: str, path: str | Path = ".", class_name: str | None = None
) -> tuple[PluginNames, Path, list[Path]]:
    """Write the project for ``name`` into ``path/name``; returns its names, folder and files.

    class_name: the prefix of the backend's and config's class names, when the backend
    name's CamelCase is not the right spelling (``OpenVINO``, not ``Openvino``).
    """
    names = check_name(name, class_name)
    target = Path(path).expanduser().resolve() / name
    check_target(target)
    files = render(names, checkout=source_checkout(), torch_version=torch_seen())
    written = []
    try:
        for relative, text in files.items():
            file = target / relative
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text, encoding="utf-8")
            written.append(file)
    except OSError as error:
        raise NewPluginError(
            f"cannot write {target}: {error.strerror or error}; pass --path to a writable folder"
        ) from error
    return names, target, written


def next_steps(names: PluginNames, target: Path) -> str:
    """What to run next, printed after the project is written."""
    where = Path.cwd()
    shown = target.relative_to(where) if target.is_relative_to(where) else target
    return "\n".join(
        [
            f"Wrote {names.distribution} in {shown}: backend {names.plugin!r} "
            f"({names.package}.{names.cls}Backend), plugin module {names.package}.plugin.",
            "",
            "Next:",
            f"  cd {shown}",
            "  python -m nox                  # fresh virtualenv: install, check discovery, run the tests",
            '  pip install -e ".[test]"       # or in your own environment, then:',
            "  pytest",
            f"  aitune plugins check {names.distribution}",
            "",
            f"Put your compiler at the TODO markers of {names.package}/backend.py; keep the tests passing.",
        ]
    )
