"""Discovery and loading against real (checked-in) ``.dist-info`` folders."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aitune_core
from aitune_core import log
from aitune_core.plugins import PluginError, PluginStatus, UnknownBackendError
from aitune_core.plugins.loader import builtin_source, discover
from aitune_core.plugins.registry import PluginRegistry

FAKE_DISTS = Path(__file__).parent / "fake_dists"

Load = Callable[..., PluginRegistry]


def by_name(registry: PluginRegistry) -> dict[str, aitune_core.plugins.PluginRecord]:
    return {record.name: record for record in registry.records()}


def test_good_plugin_loads_and_its_backend_is_found_by_name(load_fakes: Load) -> None:
    load_fakes("good")
    records = aitune_core.plugins()
    assert [(r.name, r.distribution, r.version, r.status) for r in records] == [
        ("builtin", "aitune-core", aitune_core._version.__version__, PluginStatus.LOADED),
        ("good", "aitune-fake-good", "1.0", PluginStatus.LOADED),
    ]
    assert records[1].backends == ("fake_good",) and records[1].reason == "" and records[1].api_version == 1
    import aitune_fake_good

    assert aitune_core.plugins.get_backend_class("fake_good") is aitune_fake_good.FakeGoodBackend
    assert aitune_core.plugins.get_backend_class("eager") is aitune_core.TorchEagerBackend
    assert aitune_core.plugins.backend_names() == ["eager", "fake_good", "partition"]


def test_unknown_backend_names_the_choices(load_fakes: Load) -> None:
    load_fakes("good", "import_error")
    with pytest.raises(UnknownBackendError) as raised:
        aitune_core.plugins.get_backend_class("tensorrt")
    message = str(raised.value)
    assert message.startswith("unknown backend 'tensorrt'; choose one of: eager, fake_good")
    assert "aitune-fake-import-error" in message


def test_import_error_is_logged_recorded_and_skipped(load_fakes: Load) -> None:
    with log.capture() as events:
        registry = load_fakes("import_error", "good")
    records = by_name(registry)
    failed = records["import_error"]
    assert failed.status is PluginStatus.FAILED
    assert "import failed" in failed.reason and "aitune_fake_missing_dependency" in failed.reason
    assert failed.backends == ()
    assert records["good"].status is PluginStatus.LOADED
    warnings = [e for e in events if e["event"] == "plugin failed to load"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["plugin"] == "import_error"
    assert warnings[0]["distribution"] == "aitune-fake-import-error"
    assert warnings[0]["version"] == "0.3"
    assert "aitune_fake_missing_dependency" in warnings[0]["error"]


def test_error_while_registering_leaves_nothing_behind(load_fakes: Load) -> None:
    registry = load_fakes("register_error")
    record = by_name(registry)["register_error"]
    assert record.status is PluginStatus.FAILED
    assert record.reason == "registration failed: RuntimeError: license server unreachable"
    assert registry.get_plugin("aitune-fake-register-error:register_error") is None
    assert registry.backend_names() == ["eager", "partition"]


def test_strict_mode_raises_instead(load_fakes: Load, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError) as raised:
        load_fakes("good", "register_error")
    assert raised.value.record.distribution == "aitune-fake-register-error"
    assert "license server unreachable" in str(raised.value)
    assert "aitune-fake-register-error 2.0" in str(raised.value)


@pytest.mark.parametrize("blocked", ["aitune-fake-good", "AITUNE_FAKE_GOOD", "good"])
def test_block_list_by_distribution_or_entry_point_name(
    load_fakes: Load, monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    monkeypatch.setenv("AITUNE_DISABLED_PLUGINS", f"something-else, {blocked}")
    registry = load_fakes("good", "unavailable")
    records = by_name(registry)
    assert records["good"].status is PluginStatus.DISABLED
    assert records["good"].reason == "blocked by AITUNE_DISABLED_PLUGINS"
    assert records["unavailable"].status is PluginStatus.UNAVAILABLE
    assert "fake_good" not in registry.backend_names()
    import sys

    assert "aitune_fake_good" not in sys.modules, "a blocked plugin must not even be imported"


def test_builtin_cannot_be_blocked(load_fakes: Load, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_DISABLED_PLUGINS", "builtin,aitune-core")
    monkeypatch.setenv("AITUNE_PLUGINS", "aitune-fake-good")
    registry = load_fakes("good")
    assert [(r.name, r.status) for r in registry.records()] == [
        ("builtin", PluginStatus.LOADED),
        ("good", PluginStatus.LOADED),
    ]
    assert registry.backend_names() == ["eager", "fake_good", "partition"]


def test_allow_list(load_fakes: Load, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_PLUGINS", "unavailable")
    records = by_name(load_fakes("good", "unavailable"))
    assert records["good"].status is PluginStatus.DISABLED
    assert records["good"].reason == "not in AITUNE_PLUGINS (unavailable)"
    assert records["unavailable"].status is PluginStatus.UNAVAILABLE


def test_duplicate_backend_name_refuses_both_naming_both(load_fakes: Load) -> None:
    with log.capture() as events:
        registry = load_fakes("duplicate", "good")
    records = by_name(registry)
    for name in ("dup_a", "dup_b"):
        assert records[name].status is PluginStatus.FAILED
        assert "'fake_dup'" in records[name].reason
        assert "aitune-fake-dup-a and aitune-fake-dup-b" in records[name].reason
    assert records["good"].status is PluginStatus.LOADED
    assert registry.backend_names() == ["eager", "fake_good", "partition"], (
        "a refused plugin registers none of its backends"
    )
    assert sum(e["event"] == "plugin failed to load" for e in events) == 2


def test_duplicate_resolution_does_not_depend_on_discovery_order() -> None:
    sources = discover([FAKE_DISTS / "duplicate", FAKE_DISTS / "good"])
    outcomes = []
    for ordering in (sources, list(reversed(sources))):
        registry = PluginRegistry.load(ordering, strict=False)
        outcomes.append([(r.name, r.status, r.reason, r.backends) for r in registry.records()])
    assert outcomes[0] == outcomes[1]


def test_duplicate_in_strict_mode_raises(load_fakes: Load, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_STRICT_PLUGINS", "true")
    with pytest.raises(PluginError, match="aitune-fake-dup-a and aitune-fake-dup-b"):
        load_fakes("duplicate")


def test_taking_the_builtin_name_refuses_only_the_newcomer(load_fakes: Load) -> None:
    registry = load_fakes("eager_clash")
    record = by_name(registry)["eager_clash"]
    assert record.status is PluginStatus.FAILED
    assert record.reason == "backend name 'eager' is taken by the built-in plugin of aitune-core"
    assert registry.backend_class("eager") is aitune_core.TorchEagerBackend


def test_too_new_api_version_is_refused_naming_both_versions(load_fakes: Load) -> None:
    record = by_name(load_fakes("too_new"))["too_new"]
    assert record.status is PluginStatus.FAILED
    assert "plugin API 99" in record.reason and "(plugin API 1)" in record.reason
    assert "fake_future" not in aitune_core.plugins.backend_names()


def test_unknown_hook_fails_that_plugin_only(load_fakes: Load) -> None:
    registry = load_fakes("unknown_hook", "good")
    records = by_name(registry)
    assert records["unknown_hook"].status is PluginStatus.FAILED
    assert records["unknown_hook"].reason.startswith("unknown hook 'aitune_register_backend'")
    assert "fake_typo" not in registry.backend_names()
    assert records["good"].status is PluginStatus.LOADED
    registry.check_pending()  # nothing unverified is left registered


def test_unavailable_plugin_is_listed_with_reason_and_still_registered(load_fakes: Load) -> None:
    registry = load_fakes("unavailable")
    record = by_name(registry)["unavailable"]
    assert record.status is PluginStatus.UNAVAILABLE
    assert record.reason == "fake_needs_fakelib: fakelib not importable"
    assert record.backends == ("fake_needs_fakelib",)
    assert "fake_needs_fakelib" in registry.backend_names()


def test_missing_api_declaration_is_refused(
    aitune_fake_dist: Callable[..., object], aitune_isolated_plugins: object
) -> None:
    dist = aitune_fake_dist("aitune-fake-undeclared", "VALUE = 1\n")
    registry = aitune_isolated_plugins.load(dist)  # type: ignore[attr-defined]
    record = by_name(registry)["aitune_fake_undeclared"]
    assert record.status is PluginStatus.FAILED
    assert "AITUNE_PLUGIN_API = 1" in record.reason


def test_a_distribution_found_twice_loads_once(tmp_path: Path) -> None:
    first, second = tmp_path / "site-a", tmp_path / "site-b"
    shutil.copytree(FAKE_DISTS / "good", first)
    shutil.copytree(FAKE_DISTS / "good", second)
    sources = discover([first, second])
    assert [(s.name, s.distribution) for s in sources] == [("good", "aitune-fake-good")]


def test_nothing_is_loaded_until_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from aitune_core.plugins import manager

    previous = manager.install_registry(None)
    calls: list[str] = []
    real_load = PluginRegistry.load

    def counting_load(*args: object, **kwargs: object) -> PluginRegistry:
        calls.append("load")
        return real_load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PluginRegistry, "load", counting_load)
    try:
        assert calls == []
        aitune_core.plugins()
        aitune_core.plugins.get_backend_class("eager")
        assert calls == ["load"], "discovery runs once, on first use"
    finally:
        manager.install_registry(previous)


def test_hookimpl_with_wrong_arguments_is_refused(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist(
        "aitune-fake-bad-args",
        """
        from aitune_core import hookimpl

        AITUNE_PLUGIN_API = 1


        @hookimpl
        def aitune_before_step(stage, backend):
            pass
        """,
    )
    record = by_name(aitune_isolated_plugins.load(dist))["aitune_fake_bad_args"]
    assert record.status is PluginStatus.FAILED
    assert record.reason.startswith("invalid hook implementation: PluginValidationError")
    assert "stage" in record.reason


def test_one_module_behind_two_entry_points_loads_once(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist(
        "aitune-fake-twice-named",
        "from aitune_core import hookimpl\n\nAITUNE_PLUGIN_API = 1\n",
        module="aitune_fake_twice_named",
        entry_points={"first": "aitune_fake_twice_named", "second": "aitune_fake_twice_named"},
    )
    records = by_name(aitune_isolated_plugins.load(dist))
    assert records["first"].status is PluginStatus.LOADED
    assert records["second"].status is PluginStatus.FAILED
    expected = "aitune_fake_twice_named is already loaded as plugin 'aitune-fake-twice-named:first'"
    assert records["second"].reason == expected


def test_a_plugin_using_the_registry_while_loading_fails_cleanly(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = aitune_fake_dist(
        "aitune-fake-eager-user",
        """
        import aitune_core
        from aitune_core import hookimpl

        AITUNE_PLUGIN_API = 1


        @hookimpl
        def aitune_register_backends():
            aitune_core.plugins.get_backend_class("eager")
            return []
        """,
    )
    from aitune_core.plugins import loading, manager

    monkeypatch.setattr(loading, "all_sources", lambda: [builtin_source(), *discover([dist.path])])
    manager.install_registry(None)  # the next use loads the process-wide registry lazily
    records = {record.name: record for record in aitune_core.plugins()}
    assert records["aitune_fake_eager_user"].status is PluginStatus.FAILED
    assert "while plugins were loading" in records["aitune_fake_eager_user"].reason
    assert aitune_core.plugins.get_backend_class("eager") is aitune_core.TorchEagerBackend
