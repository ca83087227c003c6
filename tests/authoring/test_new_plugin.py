"""``aitune new-plugin``: the names it derives, what it refuses, and a project that passes its own tests."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import aitune_core
from aitune_core.authoring.new_plugin import (
    MAX_NAME_LENGTH,
    NewPluginError,
    PluginNames,
    check_name,
    render,
    source_checkout,
    write_plugin,
)
from aitune_core.cli import main

ROOT = Path(aitune_core.__file__).resolve().parents[1]
FILES = {
    ".gitignore",
    "README.md",
    "conftest.py",
    "constraints.txt",
    "noxfile.py",
    "pyproject.toml",
    "demo_x/__init__.py",
    "demo_x/backend.py",
    "demo_x/plugin.py",
    "demo_x/py.typed",
    "tests/test_demo_x.py",
}


def files_under(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, target, _ = write_plugin("demo-x", tmp_path_factory.mktemp("generated"))
    return target


def test_names_follow_one_rule() -> None:
    assert PluginNames.from_name("demo-x") == PluginNames("demo-x", "demo_x", "demo_x", "DemoX")
    assert PluginNames.from_name("aitune-demo-x") == PluginNames("aitune-demo-x", "aitune_demo_x", "demo_x", "DemoX")
    assert PluginNames.from_name("x2") == PluginNames("x2", "x2", "x2", "X2")
    assert PluginNames.from_name("aitune-ov", "OpenVINO") == PluginNames("aitune-ov", "aitune_ov", "ov", "OpenVINO")


def test_the_class_name_prefix_is_the_authors_to_choose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A product name with its own capitals: OpenVINOBackend, not the CamelCase OpenvinoBackend."""
    assert main(["new-plugin", "demo-ov", "--path", str(tmp_path), "--class-name", "OpenVINO"]) == 0
    assert "demo_ov.OpenVINOBackend" in capsys.readouterr().out
    backend = (tmp_path / "demo-ov" / "demo_ov" / "backend.py").read_text()
    assert "class OpenVINOBackend(Backend):" in backend and "class OpenVINOConfig(BackendConfig):" in backend
    assert "Openvino" not in "".join(path.read_text() for path in (tmp_path / "demo-ov").rglob("*.py"))
    for prefix in ("openVINO", "Open-VINO", "OpenVINOBackend", "2Fast"):
        with pytest.raises(NewPluginError, match="is not a class-name prefix"):
            check_name("demo-ov", prefix)


def test_writes_an_installable_project(project: Path) -> None:
    assert files_under(project) == FILES
    data = tomllib.loads((project / "pyproject.toml").read_text())
    assert data["project"]["name"] == "demo-x"
    assert data["project"]["entry-points"]["aitune.plugins"] == {"demo_x": "demo_x.plugin"}
    dependencies = data["project"]["dependencies"]
    assert f"aitune-core>={aitune_core.__version__}" in dependencies
    assert not any(d.startswith("torch") for d in dependencies), "torch comes through aitune-core, never directly"
    for path in project.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")  # every file is valid Python
    assert "TODO" in (project / "demo_x" / "backend.py").read_text()


def test_pins_the_torch_it_saw(project: Path) -> None:
    torch_version = importlib.metadata.version("torch").split("+")[0]
    lines = [line for line in (project / "constraints.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"torch=={torch_version}"]


def load_noxfile(project: Path, name: str) -> ModuleType:
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location(name, project / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_noxfile_chooses_aitune_core_and_the_pin(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    noxfile = load_noxfile(project, "generated_noxfile")
    assert source_checkout() == ROOT, "these tests run from a source checkout"
    monkeypatch.delenv("AITUNE_CORE", raising=False)
    monkeypatch.delenv("AITUNE_CONSTRAINTS", raising=False)
    assert noxfile.aitune_core() == str(ROOT)
    assert noxfile.constraints() == ["-c", str(project / "constraints.txt")]
    monkeypatch.setenv("AITUNE_CONSTRAINTS", "")
    assert noxfile.constraints() == []
    monkeypatch.setenv("AITUNE_CORE", "aitune-core==9.9")
    assert noxfile.aitune_core() == "aitune-core==9.9"
    monkeypatch.setenv("AITUNE_CORE", str(project))
    assert noxfile.aitune_core() == str(project)
    monkeypatch.setenv("AITUNE_CORE", "./no/such/folder")
    with pytest.raises(SystemExit, match="no such folder"):
        noxfile.aitune_core()
    monkeypatch.delenv("AITUNE_CORE")
    monkeypatch.setattr(noxfile, "SOURCE_CHECKOUT", str(project / "gone"))
    assert noxfile.aitune_core() == f"aitune-core>={aitune_core.__version__}"


def test_a_release_defaults_to_the_package_index() -> None:
    noxfile = render(PluginNames.from_name("demo-x"), checkout=None, torch_version="2.6.0+cu124")["noxfile.py"]
    assert "SOURCE_CHECKOUT = None" in noxfile
    constraints = render(PluginNames.from_name("demo-x"), checkout=None, torch_version="2.6.0+cu124")
    assert "torch==2.6.0\n" in constraints["constraints.txt"]


def test_the_generated_project_passes_its_tests(project: Path) -> None:
    """Its conformance suite and its own tests, run from the folder as an author runs them before installing."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_") and k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary and "error" not in summary, summary
    assert int(summary.split()[0]) >= 25, summary


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Demo-X", "e.g. 'demo-x'"),
        ("demo_x", "e.g. 'demo-x'"),
        ("1demo", "starting with a letter, e.g. 'demo'"),
        ("demo--x", "single dashes"),
        ("demo-", "single dashes"),
        ("", "lowercase letters"),
        ("a" * (MAX_NAME_LENGTH + 1), f"at most {MAX_NAME_LENGTH}"),
        ("aitune", "taken by aitune itself"),
        ("aitune-core", "taken by aitune itself"),
        ("eager", "taken by aitune itself"),
        ("aitune-eager", "taken by aitune itself"),
        ("class", "Python keyword"),
        ("json", "standard library"),
        ("torch", "already importable here"),
    ],
)
def test_bad_names_are_refused_with_the_fix(name: str, message: str) -> None:
    with pytest.raises(NewPluginError) as raised:
        check_name(name)
    assert message in str(raised.value)


def test_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "demo-x").mkdir()
    write_plugin("demo-x", tmp_path)  # an empty folder is fine
    with pytest.raises(NewPluginError, match="exists and is not empty; choose another name, pass --path"):
        write_plugin("demo-x", tmp_path)
    (tmp_path / "demo-y").write_text("a file")
    with pytest.raises(NewPluginError, match="is not a folder"):
        write_plugin("demo-y", tmp_path)


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-plugin", "demo-z", "--path", str(tmp_path / "nested")]) == 0
    out = capsys.readouterr().out
    assert "demo_z.DemoZBackend" in out and "python -m nox" in out and "aitune plugins check demo-z" in out
    assert files_under(tmp_path / "nested" / "demo-z") == {f.replace("demo_x", "demo_z") for f in FILES}
    assert main(["new-plugin", "Demo-Z", "--path", str(tmp_path)]) == 2
    assert "aitune new-plugin: 'Demo-Z' is not a valid plugin name" in capsys.readouterr().err
    assert main(["new-plugin", "demo-z", "--path", str(tmp_path / "nested")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_the_command_line_imports_the_tools_only_when_used() -> None:
    code = "import sys, aitune_core.cli; print(sorted(m for m in sys.modules if 'authoring' in m))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
