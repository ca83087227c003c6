"""Faulty plugins never take the host down: exits at import, hooks that raise (slow imports: their own file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import aitune_core
from aitune_core import log
from aitune_core.backends import BackendState, BuildContext
from aitune_core.config import config
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.plugins import PluginError, PluginHookError, PluginRecord, PluginStatus
from aitune_core.plugins.registry import PluginRegistry
from aitune_core.testing.fake_dists import write_fake_dist

ROOT = Path(aitune_core.__file__).resolve().parents[1]

FAULTY_SOURCE = """
from aitune_core import hookimpl
from aitune_core.backends import TorchEagerBackend
from aitune_core.plugins import Candidate

AITUNE_PLUGIN_API = 1

RAISE: set[str] = set()
"Hooks (by name) that raise RuntimeError; 'aitune_wrap_step teardown' raises after the step."
CALLS: list[str] = []


def _maybe_raise(hook):
    CALLS.append(hook)
    if hook in RAISE:
        raise RuntimeError(f"{hook} is broken")


@hookimpl
def aitune_graph_key_parts(arguments):
    _maybe_raise("aitune_graph_key_parts")
    return "faulty-part"


@hookimpl
def aitune_before_step(step, backend):
    _maybe_raise("aitune_before_step")


@hookimpl(wrapper=True)
def aitune_wrap_step(step):
    _maybe_raise("aitune_wrap_step")
    try:
        return (yield)
    finally:
        _maybe_raise("aitune_wrap_step teardown")


@hookimpl
def aitune_after_step(step, error):
    _maybe_raise("aitune_after_step")


@hookimpl
def aitune_default_candidates(device):
    _maybe_raise("aitune_default_candidates")
    return []


@hookimpl
def aitune_choose_strategy(module, device):
    _maybe_raise("aitune_choose_strategy")
    return None


@hookimpl
def aitune_extend_converter(converter):
    _maybe_raise("aitune_extend_converter")


@hookimpl
def aitune_register_executors():
    _maybe_raise("aitune_register_executors")
    return []
"""

FAULTY_ID = "aitune-fake-faulty:aitune_fake_faulty"


def record_of(registry: PluginRegistry, name: str) -> PluginRecord:
    return {record.name: record for record in registry.records()}[name]


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["log_level"] == "error"]


@pytest.fixture
def faulty(aitune_fake_dist: Any) -> Iterator[Any]:
    """The faulty plugin's distribution; the test loads it (with others) and picks what raises."""
    yield aitune_fake_dist("aitune-fake-faulty", FAULTY_SOURCE)


def load_faulty(isolated: Any, dist: Any, *raising: str, strict: bool = False) -> tuple[PluginRegistry, ModuleType]:
    from aitune_core.testing.fixtures import IsolatedPlugins

    assert isinstance(isolated, IsolatedPlugins)
    registry = isolated.load(dist, Path(__file__).parent / "fake_dists" / "good", strict=strict)
    import aitune_fake_faulty

    aitune_fake_faulty.RAISE.update(raising)
    aitune_fake_faulty.CALLS.clear()  # the hooks called while it loaded (executors are registered then)
    return registry, aitune_fake_faulty


def assert_disabled_once(events: list[dict[str, Any]], registry: PluginRegistry, raising: str) -> None:
    """One error names the plugin, the hook and the error; its record says the same."""
    hook = raising.split()[0]
    record = record_of(registry, "aitune_fake_faulty")
    assert record.status is PluginStatus.FAILED
    assert record.reason == f"raised RuntimeError: {raising} is broken in {hook}; disabled"
    assert not record.active
    [error] = errors(events)
    assert error["plugin"] == "aitune_fake_faulty"
    assert error["distribution"] == "aitune-fake-faulty"
    assert error["hook"] == hook
    assert error["error"] == f"RuntimeError: {raising} is broken"
    assert record_of(registry, "good").status is PluginStatus.LOADED, "other plugins are left alone"


# --------------------------------------------------------------------------- import and registration
def test_sys_exit_at_import_fails_that_plugin_only(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist("aitune-fake-exits", "import sys\n\nsys.exit(3)\n")
    with log.capture() as events:
        registry = aitune_isolated_plugins.load(dist, Path(__file__).parent / "fake_dists" / "good")
    record = record_of(registry, "aitune_fake_exits")
    assert record.status is PluginStatus.FAILED
    assert record.reason == "import failed: SystemExit: 3"
    assert record.backends == ()
    assert record_of(registry, "good").status is PluginStatus.LOADED
    [warning] = [e for e in events if e["event"] == "plugin failed to load"]
    assert warning["plugin"] == "aitune_fake_exits" and warning["error"] == "import failed: SystemExit: 3"


def test_sys_exit_while_registering_fails_that_plugin_only(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    source = """
    import sys

    from aitune_core import hookimpl

    AITUNE_PLUGIN_API = 1


    @hookimpl
    def aitune_register_backends():
        sys.exit("no license")
    """
    registry = aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-exits-late", source))
    record = record_of(registry, "aitune_fake_exits_late")
    assert record.status is PluginStatus.FAILED
    assert record.reason == "registration failed: SystemExit: no license"
    assert registry.get_plugin(f"aitune-fake-exits-late:{record.name}") is None


def test_strict_mode_turns_sys_exit_into_a_plugin_error(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AITUNE_STRICT_PLUGINS", "1")
    dist = aitune_fake_dist("aitune-fake-exits", "import sys\n\nsys.exit(3)\n")
    with pytest.raises(PluginError, match=r"failed to load: import failed: SystemExit: 3"):
        aitune_isolated_plugins.load(dist)


def test_keyboard_interrupt_at_import_propagates(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist("aitune-fake-interrupted", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        aitune_isolated_plugins.load(dist)


@pytest.mark.together  # the listing goes on past it to the installed plugins
def test_cli_lists_a_plugin_that_exits_at_import(tmp_path: Path) -> None:
    dist = write_fake_dist(tmp_path, "aitune-fake-exits", "import sys\n\nsys.exit(3)\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(dist.path), str(ROOT)])
    result = subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    [row] = [p for p in json.loads(result.stdout)["plugins"] if p["distribution"] == "aitune-fake-exits"]
    assert (row["status"], row["reason"]) == ("failed", "import failed: SystemExit: 3")


# --------------------------------------------------------------------------- graph key parts
def test_raising_graph_key_parts_disables_the_plugin_and_calls_go_on(
    faulty: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    registry, plugin = load_faulty(aitune_isolated_plugins, faulty, "aitune_graph_key_parts")
    import aitune_fake_good

    aitune_fake_good.KEY_PART = "mode-a"
    try:
        linear = torch.nn.Linear(4, 4)
        first, second = (aitune_core.Module(linear, unique_name(stem)) for stem in ("first", "second"))
        x = torch.randn(2, 4)
        with log.capture() as events:
            torch.testing.assert_close(first(x), linear(x))
        assert_disabled_once(events, registry, "aitune_graph_key_parts")
        with log.capture() as later:
            torch.testing.assert_close(first(x), linear(x))
            torch.testing.assert_close(second(x), linear(x))
        assert errors(later) == [], "a disabled plugin is never called again, by any module"
        assert plugin.CALLS == ["aitune_graph_key_parts"]
        assert len(first.graph_specs) == 1
        assert first.graph_specs[0].key[-1] == ("plugin", (("aitune-fake-good:good", "mode-a"),))
    finally:
        aitune_fake_good.KEY_PART = None


def test_graph_key_parts_without_faults_still_contribute(
    faulty: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    load_faulty(aitune_isolated_plugins, faulty)
    wrapped = aitune_core.Module(torch.nn.Linear(4, 4), unique_name("healthy"))
    wrapped(torch.randn(2, 4))
    assert wrapped.graph_specs[0].key[-1] == ("plugin", ((FAULTY_ID, "faulty-part"),))


def test_keyboard_interrupt_in_a_hook_propagates_and_disables_nothing(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    source = """
    from aitune_core import hookimpl

    AITUNE_PLUGIN_API = 1


    @hookimpl
    def aitune_graph_key_parts():
        raise KeyboardInterrupt
    """
    registry = aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-ctrl-c", source))
    wrapped = aitune_core.Module(torch.nn.Linear(4, 4), unique_name("interrupted"))
    with pytest.raises(KeyboardInterrupt):
        wrapped(torch.randn(2, 4))
    assert record_of(registry, "aitune_fake_ctrl_c").status is PluginStatus.LOADED


def test_strict_mode_lets_a_hook_error_raise(
    faulty: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    registry, _ = load_faulty(aitune_isolated_plugins, faulty, "aitune_graph_key_parts", strict=True)
    wrapped = aitune_core.Module(torch.nn.Linear(4, 4), unique_name("strict"))
    with pytest.raises(PluginHookError, match="aitune_graph_key_parts is broken") as raised:
        wrapped(torch.randn(2, 4))
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert record_of(registry, "aitune_fake_faulty").status is PluginStatus.LOADED


@pytest.mark.parametrize(
    "hook",
    [
        "aitune_before_step",
        "aitune_wrap_step",
        "aitune_wrap_step teardown",
        "aitune_after_step",
        "aitune_default_candidates",
        "aitune_choose_strategy",
    ],
)
def test_strict_mode_stops_tuning_at_a_hook_that_raises(
    hook: str,
    faulty: Any,
    aitune_isolated_plugins: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lifecycle hook raising while a candidate builds fails tune(), not the candidate (which left it eager)."""
    monkeypatch.setenv("AITUNE_STRICT_PLUGINS", "1")
    registry, plugin = load_faulty(aitune_isolated_plugins, faulty, hook, strict=None)
    config.cache_dir = tmp_path / "cache"
    model = torch.nn.Linear(4, 4).eval()
    module = aitune_core.Module(model, unique_name("strict"))
    asked = hook in ("aitune_default_candidates", "aitune_choose_strategy")  # asked only when no strategy is given
    strategy = None if asked else aitune_core.FirstWinsStrategy([aitune_core.TorchEagerBackend()])
    with pytest.raises(PluginHookError) as raised:
        aitune_core.tune(module, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    message = str(raised.value)
    assert message.startswith("aitune plugin 'aitune_fake_faulty' from aitune-fake-faulty ")
    assert f"raised RuntimeError: {hook} is broken in its hook {hook.split()[0]};" in message
    assert "AITUNE_STRICT_PLUGINS=1" in message
    assert plugin.CALLS.count(hook) == 1, "stopped at the first fault"
    assert module.state is aitune_core.ModuleState.RECORDING and not module.backends
    assert record_of(registry, "aitune_fake_faulty").status is PluginStatus.LOADED


# --------------------------------------------------------------------------- lifecycle hooks
@pytest.mark.parametrize(
    "hook", ["aitune_before_step", "aitune_wrap_step", "aitune_wrap_step teardown", "aitune_after_step"]
)
def test_raising_lifecycle_hook_does_not_fail_tuning(
    hook: str, faulty: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    registry, plugin = load_faulty(aitune_isolated_plugins, faulty, hook)
    import aitune_fake_good

    aitune_fake_good.EVENTS.clear()
    config.cache_dir = tmp_path / "cache"
    model = torch.nn.Linear(4, 4).eval()
    module = aitune_core.Module(model, unique_name("tuned"))
    strategy = aitune_core.FirstWinsStrategy([aitune_core.TorchEagerBackend()])
    with log.capture() as events:
        report = aitune_core.tune(module, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    assert isinstance(module.backends["0"], aitune_core.TorchEagerBackend)
    assert report.selected(module.name) == aitune_core.TorchEagerBackend().describe()
    x = torch.randn(3, 4)
    torch.testing.assert_close(module(x), model(x))
    assert_disabled_once(events, registry, hook)
    assert plugin.CALLS.count(hook) == 1, "the plugin is not called after its fault"
    good_steps = [event[:2] for event in aitune_fake_good.EVENTS if event[1] == "build"]
    assert good_steps == [("before", "build"), ("wrap enter", "build"), ("wrap exit", "build"), ("after", "build")]


def test_a_failing_step_still_raises_its_own_error(
    faulty: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A wrapper that raises while a step fails is the plugin's fault; the step's error still propagates."""
    registry, _ = load_faulty(aitune_isolated_plugins, faulty, "aitune_wrap_step teardown")
    import aitune_fake_good

    module = aitune_core.Module(torch.nn.Linear(4, 2), f"fail-build-{unique_name('x')}")
    with global_context:
        global_context.set(BATCH_SIZE_KEY, 1)
        module(torch.randn(1, 4))
    graph = next(iter(module.graphs.values()))
    context = BuildContext(
        module=module.module,
        module_name=module.name,
        graph_spec=graph.spec,
        samples=graph.samples,
        device=torch.device("cpu"),
        cache_dir=tmp_path,
        signature=module.signature,
    )
    backend = aitune_fake_good.FakeGoodBackend()
    with log.capture() as events, pytest.raises(ValueError, match="cannot build this one"):
        backend.build(context)
    assert backend.state is BackendState.INIT
    assert_disabled_once(events, registry, "aitune_wrap_step teardown")


# --------------------------------------------------------------------------- hooks asked during tuning
def _default_candidates() -> None:
    names = [candidate.name for candidate in aitune_core.plugins.default_candidates("cpu")]
    assert names == ["fake_good", "eager"]


def _choose_strategy() -> None:
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is None


def _extend_converter() -> None:
    import aitune_fake_good

    from aitune_core.serialization import converter

    assert converter().unstructure(aitune_fake_good.Level(2)) == 2, "the good plugin's extension still applies"


@pytest.mark.parametrize(
    ("hook", "use"),
    [
        ("aitune_default_candidates", _default_candidates),
        ("aitune_choose_strategy", _choose_strategy),
        ("aitune_extend_converter", _extend_converter),
    ],
)
def test_raising_hook_is_left_out_and_its_plugin_disabled(
    hook: str, use: Callable[[], None], faulty: Any, aitune_isolated_plugins: Any
) -> None:
    registry, plugin = load_faulty(aitune_isolated_plugins, faulty, hook)
    with log.capture() as events:
        use()
    assert_disabled_once(events, registry, hook)
    with log.capture() as later:
        use()
    calls = plugin.CALLS
    assert errors(later) == [] and calls == [hook]


_CHOOSER = """
from aitune_core import hookimpl, FirstWinsStrategy

AITUNE_PLUGIN_API = 1
ASKED = []
ANSWER = None


@hookimpl({options})
def aitune_choose_strategy(module):
    ASKED.append(module)
    return ANSWER
"""


def test_choose_strategy_stops_at_the_first_answer_in_pluggys_order(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    """pluggy asks the plugin registered last first (distribution names sort last), and stops at its answer."""
    aitune_isolated_plugins.load(
        Path(__file__).parent / "fake_dists" / "good",
        aitune_fake_dist("aitune-fake-later", _CHOOSER.format(options="")),
    )
    import aitune_fake_good
    import aitune_fake_later

    aitune_fake_later.ANSWER = later = aitune_core.FirstWinsStrategy()
    aitune_fake_good.STRATEGY = aitune_core.MaxThroughputStrategy()
    try:
        assert aitune_core.plugins.choose_strategy(object(), "cpu") is later
    finally:
        aitune_fake_good.STRATEGY = None
    assert len(aitune_fake_later.ASKED) == 1


def test_tryfirst_is_asked_before_the_others(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """``@hookimpl(tryfirst=True)`` goes first whatever the registration order, as pluggy documents."""
    aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-fake-eager-to-answer", _CHOOSER.format(options="tryfirst=True")),
        aitune_fake_dist("aitune-fake-last", _CHOOSER.format(options="")),
    )
    import aitune_fake_eager_to_answer
    import aitune_fake_last

    aitune_fake_eager_to_answer.ANSWER = first = aitune_core.FirstWinsStrategy()
    aitune_fake_last.ANSWER = aitune_core.MaxThroughputStrategy()
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is first
    assert aitune_fake_last.ASKED == [], "the tryfirst answer ends the call"


def test_a_strategy_class_instead_of_an_instance_is_refused_naming_the_plugin(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-class-chooser", _CHOOSER.format(options="")))
    import aitune_fake_class_chooser

    aitune_fake_class_chooser.ANSWER = aitune_core.FirstWinsStrategy  # the class, a common slip
    with log.capture() as events:
        assert aitune_core.plugins.choose_strategy(object(), "cpu") is None
    (warning,) = [e for e in events if e["event"] == "invalid strategy from a plugin, ignored"]
    assert warning["distribution"] == "aitune-fake-class-chooser" and "instance" in warning["hint"]
    module = aitune_core.Module(torch.nn.Linear(4, 2).eval(), unique_name("chooser"))
    aitune_core.tune(module, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2])  # the default strategy serves
