"""``docs/hooks.md`` is generated from the hook specs and must not drift from them."""

from __future__ import annotations

from pathlib import Path

import pluggy
import pytest

from aitune_core.plugins import hook_reference, hookspecs
from aitune_core.plugins.api import PROJECT_NAME

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


def test_hooks_page_matches_the_specs() -> None:
    assert DOC.read_text() == hook_reference.render_markdown(hookspecs), (
        "docs/hooks.md is stale; run: python -m aitune_core.plugins.hookspecs --markdown > docs/hooks.md"
    )


def test_generator_command_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert hook_reference.main(hookspecs, ["--markdown"]) == 0
    assert capsys.readouterr().out == hook_reference.render_markdown(hookspecs)
    assert hook_reference.main(hookspecs, []) == 2


def test_every_spec_is_documented_and_listed() -> None:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    names = [spec.__name__ for spec in hookspecs.hook_specs()]
    assert sorted(names) == sorted(name for name in vars(manager.hook) if not name.startswith("_"))
    page = hook_reference.render_markdown(hookspecs)
    for spec in hookspecs.hook_specs():
        doc = spec.__doc__ or ""
        assert "**Why.**" in doc and "**When.**" in doc and "```python" in doc, spec.__name__
        assert f"## {spec.__name__}\n" in page
        assert all(name in spec.__annotations__ for name in ("return",)), f"{spec.__name__} is not typed"
