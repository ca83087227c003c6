"""The ``AITUNE_*`` environment: read in ``config`` only, and every yes/no variable parsed one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aitune_core
from aitune_core.config import config, env_flag, env_text, parse_flag
from aitune_core.plugins.loader import strict_from_env

PACKAGE = Path(aitune_core.__file__).parent

COPIES_THE_ENVIRONMENT = {
    "config.py": "where the variables are read",
    "executors/isolated/subprocess_executor.py": "a candidate child's environment: this one's, with PYTHONPATH",
    "authoring/plugin_check.py": "the plugin check's child: this environment, limited to one plugin",
    "testing/child_process.py": "a test's child: this environment without AITUNE_* and with PYTHONPATH",
}
"""The modules that touch ``os.environ``, and why; any other asks ``config``."""


def test_only_config_reads_the_environment() -> None:
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr in ("environ", "getenv")
            ):
                readers.add(path.relative_to(PACKAGE).as_posix())
    assert readers == set(COPIES_THE_ENVIRONMENT)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("", False), ("0", False), ("No", False)],
)
def test_a_flag_is_one_of_the_usual_words(text: str, value: bool) -> None:
    assert parse_flag("AITUNE_X", text) is value
    assert env_flag("AITUNE_X", {"AITUNE_X": text}) is value


def test_every_flag_refuses_a_typo_with_the_variable_named() -> None:
    with pytest.raises(ValueError, match=r"AITUNE_X must be 1 or 0 .*got 'ture'"):
        env_flag("AITUNE_X", {"AITUNE_X": "ture"})
    # AITUNE_STRICT_PLUGINS=ture used to mean "not strict", silently.
    with pytest.raises(ValueError, match="AITUNE_STRICT_PLUGINS must be 1 or 0"):
        strict_from_env({"AITUNE_STRICT_PLUGINS": "ture"})
    assert strict_from_env({"AITUNE_STRICT_PLUGINS": "On"}) is True
    assert env_flag("AITUNE_X", {}) is False and env_text("AITUNE_X", {"AITUNE_X": "  text "}) == "text"


def test_settings_read_their_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AITUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AITUNE_EXECUTOR", " subprocess ")
    monkeypatch.setenv("AITUNE_ALLOW_LOSSY", "yes")
    config.reset()
    assert (config.cache_dir, config.executor, config.allow_lossy) == (tmp_path, "subprocess", True)


def test_config_takes_executor_objects_without_knowing_the_executor_classes() -> None:
    tree = ast.parse((PACKAGE / "config.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not any("executors" in (module or "") for module in imported)
    assert not any("Executor" in name for name in names)

    from aitune_core.executors import InProcessExecutor

    config.executor = executor = InProcessExecutor()
    assert config.executor is executor
    with pytest.raises(ValueError, match="executor name such as 'inprocess'"):
        config.executor = object()
