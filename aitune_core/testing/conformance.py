"""The conformance suite every backend must pass.

Strategies, checkpoints and routing rely on backends behaving alike: the state machine
refuses illegal steps, a backend survives ``to_dict`` -> JSON -> ``from_dict``, keys
depend on the config alone, blueprints come unbuilt, and outputs match eager at the
smallest, typical and largest shapes the graph was recorded with. Writing those checks
once here means every backend is held to the same contract. Every lifecycle step, and
a call, must also leave the user's module untouched: its modes, its Parameter and
buffer objects and their values (the same check tuning runs around every step).
Each backend builds in a folder of its own, as in tuning, and that folder is deleted
before the backend is restored from ``to_dict`` data: whatever it needs after a
restart must be a declared artifact (an existing file) or JSON extra state, never a
path into the build folder.

Subclass it in a test module (the subclass name must start with ``Test``)::

    from aitune_core.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        def make_backend(self):
            return MyBackend()

The graphs come from really recording the model: it is wrapped in
``aitune_core.Module`` and called once per batch size under the global context, as
``tune`` does, so the suite sees the same graph specs and samples a strategy would.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import torch

from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.persistable import NotPersistableError, check_artifacts
from aitune_core.backends.state import TRANSITIONS, BackendState, IllegalStateTransitionError
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.guard import ModuleChangedError, ModuleGuard
from aitune_core.metadata.sample_metadata import ShapeChoice
from aitune_core.module.wrapper import Module
from aitune_core.testing.outputs import assert_outputs_close
from aitune_core.validation.inputs import to_device

STEPS = ("build", "activate", "deactivate", "deploy")
ILLEGAL = [(state, step) for state in BackendState for step in STEPS if state not in TRANSITIONS[step]]
SHAPES: tuple[ShapeChoice, ...] = ("min", "opt", "max")

_run_ids = itertools.count()


@attrs.define
class ConformanceRun:
    """A recorded model: one build context per graph, and the original model for reference."""

    model: torch.nn.Module
    wrapped: Module
    contexts: list[BuildContext]
    device: torch.device

    @property
    def context(self) -> BuildContext:
        return self.contexts[0]


def _call(function: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return function(**inputs)
    if isinstance(inputs, tuple):
        return function(*inputs)
    return function(inputs)


def _step(backend: Backend, step: str, context: BuildContext) -> None:
    if step == "build":
        backend.build(context)
    elif step == "activate":
        backend.activate(context)
    elif step == "deactivate":
        backend.deactivate()
    else:
        backend.deploy(context)


def private_build(context: BuildContext) -> BuildContext:
    """``context`` with a new, empty build folder inside its own, which no other build uses."""
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    return attrs.evolve(context, cache_dir=Path(tempfile.mkdtemp(prefix="build-", dir=context.cache_dir)))


def _copy_artifacts(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Move a backend's artifacts elsewhere, as loading a checkpoint on another machine does."""
    folder.mkdir(parents=True, exist_ok=True)
    moved = {}
    for name, path in data.get("artifacts", {}).items():
        source = Path(path)
        target = folder / f"{name}-{source.name}"
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
        moved[name] = str(target)
    return {**data, "artifacts": moved}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _points_into(text: str, folder: Path) -> bool:
    """Whether ``text`` names ``folder`` or something in it, as written or resolved."""
    names = {str(folder), str(folder.resolve())}
    return any(name in text for name in names)


class BackendConformance:
    """Tests a backend must pass. Override ``make_backend`` and, usually, the model and inputs.

    Class attributes: ``batch_sizes`` (at least two, so graphs get a batch axis),
    ``rtol``/``atol`` (``None`` keeps ``torch.testing.assert_close``'s per-dtype
    defaults) and ``device``.
    """

    batch_sizes: ClassVar[tuple[int, ...]] = (1, 2, 4)
    rtol: ClassVar[float | None] = None
    atol: ClassVar[float | None] = None
    device: ClassVar[str] = "cpu"

    # ------------------------------------------------------------------ to provide
    def make_backend(self) -> Backend:
        """A fresh backend with a fixed config; called several times per test."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_backend()")

    def make_other_backend(self) -> Backend | None:
        """The same backend class with another config, for the key tests; None skips them."""
        return None

    def make_model(self) -> torch.nn.Module:
        """A small model the backend supports."""
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def make_inputs(self, batch_size: int) -> Any:
        """One call's inputs at ``batch_size``: a tuple of positional arguments, a dict of keyword
        arguments, or a single tensor."""
        return (torch.randn(batch_size, 8),)

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture
    def aitune_conformance(self, tmp_path: Path) -> Iterator[ConformanceRun]:
        device = torch.device(self.device)
        availability = type(self.make_backend()).availability(device)
        if not availability.available:
            pytest.skip(f"backend unavailable on {device}: {availability.reason}")
        torch.manual_seed(0)
        model = self.make_model().eval().to(device)
        name = f"aitune-conformance-{type(self).__name__}-{next(_run_ids)}"
        wrapped = Module(model, name)
        with torch.no_grad():
            for batch_size in self.batch_sizes:
                with global_context:
                    global_context.set(BATCH_SIZE_KEY, batch_size)
                    _call(wrapped, to_device(self.make_inputs(batch_size), device))
        contexts = [
            BuildContext(
                module=model,
                module_name=name,
                graph_spec=record.spec,
                samples=record.samples,
                device=device,
                cache_dir=tmp_path / "cache" / record.spec.name,
                signature=wrapped.signature,
            )
            for record in wrapped.graphs.values()
        ]
        yield ConformanceRun(model, wrapped, contexts, device)

    # ------------------------------------------------------------------ helpers
    def built(self, run: ConformanceRun, context: BuildContext | None = None) -> Backend:
        """A backend built in a build folder of its own, as tuning builds every candidate."""
        backend = self.make_backend()
        backend.build(private_build(context or run.context))
        return backend

    def round_trip(self, backend: Backend, folder: Path) -> Backend:
        """``to_dict`` -> JSON text -> ``from_dict``, with the artifacts moved to ``folder``.

        The backend's build folder is deleted before it is restored, as a checkpoint
        loaded on another machine, or after the cache was cleaned, finds none: what the
        restored backend needs must come from its artifacts and its extra state.
        """
        data = backend.to_dict()
        data["artifacts"] = {name: str(path) for name, path in data.get("artifacts", {}).items()}
        text = json.dumps(data)
        moved = _copy_artifacts(json.loads(text), folder)
        if backend.context is not None:
            shutil.rmtree(backend.context.cache_dir, ignore_errors=True)
        return type(backend).from_dict(moved)

    def in_state(self, run: ConformanceRun, state: BackendState, folder: Path) -> Backend:
        if state is BackendState.INIT:
            return self.make_backend()
        if state is BackendState.CHECKPOINT_LOADED:
            return self.round_trip(self.built(run), folder)
        backend = self.built(run)
        if state is BackendState.INACTIVE:
            backend.deactivate()
        elif state is BackendState.DEPLOYED:
            backend.deploy(run.context)
        assert backend.state is state
        return backend

    def assert_matches_eager(self, run: ConformanceRun, backend: Backend, which: ShapeChoice = "opt") -> None:
        """Outputs of ``backend`` equal the original model's at the graph's ``which`` shapes."""
        for context in run.contexts:
            if backend.context is not None and backend.context.graph_spec is not context.graph_spec:
                continue
            sample = context.samples[0]
            inputs = to_device(context.graph_spec.input_spec.make_shape(sample.arguments, which), run.device)
            args, kwargs = context.signature.bind(inputs)
            with torch.no_grad():
                expected = run.model(*args, **kwargs)
                actual = backend(*args, **kwargs)
            assert_outputs_close(actual, expected, self.rtol, self.atol, f"{which} shapes")

    def call_once(self, run: ConformanceRun, backend: Backend) -> None:
        """Call ``backend`` on the first graph's first recorded sample."""
        args, kwargs = run.context.signature.bind(to_device(run.context.samples[0].arguments, run.device))
        with torch.no_grad():
            backend(*args, **kwargs)

    # ------------------------------------------------------------------ the user's module
    def test_leaves_the_users_module_untouched(self, aitune_conformance: ConformanceRun) -> None:
        """No step may change ``context.module``: eager, the fallback and later calls run it."""
        run = aitune_conformance
        backend = self.make_backend()
        guard = ModuleGuard(run.model, "model")
        steps = [
            ("build", lambda: backend.build(run.context)),
            ("a call", lambda: self.call_once(run, backend)),
            ("deactivate", backend.deactivate),
            ("activate", lambda: backend.activate(run.context)),
            ("a call after activate", lambda: self.call_once(run, backend)),
            ("deploy", lambda: backend.deploy(run.context)),
            ("a call after deploy", lambda: self.call_once(run, backend)),
        ]
        problem = ""
        for step, action in steps:
            try:
                with guard.step(step):
                    action()
            except ModuleChangedError as error:
                problem = str(error)
                break
        if problem:
            pytest.fail(
                f"{type(backend).__name__} {problem}. A backend must never change context.module: transform a "
                "copy (copy.deepcopy(context.module)) and leave the original's modes and weights as they are",
                pytrace=False,
            )

    # ------------------------------------------------------------------ the recorded graphs
    def test_recorded_graphs_have_a_batch_axis(self, aitune_conformance: ConformanceRun) -> None:
        assert len(set(self.batch_sizes)) >= 2, "give at least two batch sizes, so graphs get a batch axis"
        for context in aitune_conformance.contexts:
            assert context.samples, f"graph {context.graph_spec.name} kept no sample"
            assert context.graph_spec.input_spec.has_batch_axis(), (
                f"graph {context.graph_spec.name} has no batch axis; make_inputs(batch_size) must use batch_size"
            )

    # ------------------------------------------------------------------ state machine
    def test_new_backend_is_init_and_refuses_calls(self, aitune_conformance: ConformanceRun) -> None:
        backend = self.make_backend()
        assert backend.state is BackendState.INIT
        args, kwargs = aitune_conformance.context.signature.bind(aitune_conformance.context.samples[0].arguments)
        with pytest.raises(RuntimeError, match="INIT"):
            backend(*args, **kwargs)

    def test_legal_lifecycle(self, aitune_conformance: ConformanceRun) -> None:
        run = aitune_conformance
        backend = self.make_backend()
        backend.build(run.context)
        assert backend.state is BackendState.ACTIVE
        self.assert_matches_eager(run, backend)
        backend.deactivate()
        assert backend.state is BackendState.INACTIVE
        backend.activate(run.context)
        assert backend.state is BackendState.ACTIVE
        self.assert_matches_eager(run, backend)
        backend.deploy(run.context)
        assert backend.state is BackendState.DEPLOYED
        self.assert_matches_eager(run, backend)

    @pytest.mark.parametrize(("state", "step"), ILLEGAL, ids=[f"{state.name}-{step}" for state, step in ILLEGAL])
    def test_illegal_transition_raises(
        self, aitune_conformance: ConformanceRun, tmp_path: Path, state: BackendState, step: str
    ) -> None:
        backend = self.in_state(aitune_conformance, state, tmp_path / "restored")
        with pytest.raises(IllegalStateTransitionError) as raised:
            _step(backend, step, aitune_conformance.context)
        message = str(raised.value)
        target = raised.value.target
        assert state.name in message and target.name in message, message
        assert backend.state is state

    # ------------------------------------------------------------------ persistence
    def test_round_trip_then_activate(self, aitune_conformance: ConformanceRun, tmp_path: Path) -> None:
        run = aitune_conformance
        original = self.built(run)
        restored = self.round_trip(original, tmp_path / "restored")
        assert type(restored) is type(original)
        assert restored.state is BackendState.CHECKPOINT_LOADED
        assert restored.config == original.config
        assert restored.key() == original.key()
        assert restored.to_dict()["config"] == original.to_dict()["config"]
        restored.activate(run.context)
        assert restored.state is BackendState.ACTIVE
        self.assert_matches_eager(run, restored)

    def test_round_trip_then_deploy(self, aitune_conformance: ConformanceRun, tmp_path: Path) -> None:
        run = aitune_conformance
        restored = self.round_trip(self.built(run), tmp_path / "restored")
        restored.deploy(run.context)
        assert restored.state is BackendState.DEPLOYED
        self.assert_matches_eager(run, restored)

    def test_declared_artifacts_are_shipped(self, aitune_conformance: ConformanceRun) -> None:
        """What a checkpoint copies is what the backend declares: existing files, and some when it is not JIT.

        A backend that is not JIT tells ``load`` it may release the module's weights, so it
        must restore from its own artifacts; and every artifact must be a file by then
        (``save`` copies files), native ones included.
        """
        backend = self.built(aitune_conformance)
        name = type(backend).__name__
        data = backend.to_dict()
        artifacts = data.get("artifacts", {})
        if not backend.is_jit and not artifacts:
            pytest.fail(
                f"{name}.is_jit is False, which lets load release the module's weights, but it ships no artifacts: "
                "list the files it restores from in _artifacts(), or return True from is_jit",
                pytrace=False,
            )
        missing = sorted(set(backend.native_artifacts()) - set(artifacts))
        if missing:
            pytest.fail(f"{name}.native_artifacts() names {missing}, which _artifacts() does not ship", pytrace=False)
        try:
            check_artifacts(name, artifacts)
        except NotPersistableError as error:
            pytest.fail(f"a checkpoint could not hold it: {error}", pytrace=False)

    def test_extra_state_holds_no_build_folder_paths(self, aitune_conformance: ConformanceRun) -> None:
        """A path into the build folder in ``_extra_state`` points nowhere once the checkpoint is loaded elsewhere."""
        backend = self.built(aitune_conformance)
        assert backend.context is not None
        folder = backend.context.cache_dir
        stale = [text for text in _strings(backend.to_dict().get("extra", {})) if _points_into(text, folder)]
        if stale:
            pytest.fail(
                f"{type(backend).__name__}._extra_state() holds {stale[0]!r}, a path into its build folder, which a "
                "loaded checkpoint does not have: ship the file as an artifact (_artifacts()) and take its new "
                "path in _restore()",
                pytrace=False,
            )

    # ------------------------------------------------------------------ identity
    def test_key_is_stable(self, aitune_conformance: ConformanceRun) -> None:
        first, second = self.make_backend(), self.make_backend()
        assert isinstance(first.key(), str) and first.key()
        assert first.key() == second.key()
        assert json.loads(json.dumps(first.key())) == first.key()
        built = self.built(aitune_conformance)
        assert built.key() == first.key(), "a key must depend on the config only, not on the build"

    def test_other_config_other_key(self) -> None:
        other = self.make_other_backend()
        if other is None:
            pytest.skip("make_other_backend() returns None")
        backend = self.make_backend()
        assert type(other) is type(backend)
        assert other.config != backend.config, "make_other_backend() must change the config"
        assert other.key() != backend.key()
        assert other.key() == self.make_other_backend().key()  # type: ignore[union-attr]

    def test_blueprint_is_unbuilt(self, aitune_conformance: ConformanceRun) -> None:
        run = aitune_conformance
        built = self.built(run)
        copy = built.blueprint()
        assert copy is not built
        assert type(copy) is type(built)
        assert copy.state is BackendState.INIT
        assert copy.context is None
        assert copy.config == built.config and copy.key() == built.key()
        copy.build(run.context)
        assert built.state is BackendState.ACTIVE
        self.assert_matches_eager(run, built)
        self.assert_matches_eager(run, copy)

    # ------------------------------------------------------------------ correctness
    @pytest.mark.parametrize("which", SHAPES)
    def test_matches_eager_at_shape(self, aitune_conformance: ConformanceRun, which: ShapeChoice) -> None:
        run = aitune_conformance
        for context in run.contexts:
            backend = self.built(run, context)
            self.assert_matches_eager(run, backend, which)

    @pytest.mark.parametrize("which", SHAPES)
    def test_inference_callable_gives_what_calls_give(
        self, aitune_conformance: ConformanceRun, which: ShapeChoice, tmp_path: Path
    ) -> None:
        """Routes call :meth:`Backend.inference_callable`: it must return exactly what calling the backend does,
        built, and restored from a checkpoint and deployed."""
        run = aitune_conformance
        for context in run.contexts:
            built = self.built(run, context)
            restored = self.round_trip(self.built(run, context), tmp_path / context.graph_spec.name)
            restored.deploy(context)
            for backend in (built, restored):
                sample = context.samples[0]
                inputs = to_device(context.graph_spec.input_spec.make_shape(sample.arguments, which), run.device)
                args, kwargs = context.signature.bind(inputs)
                with torch.no_grad():
                    expected = backend(*args, **kwargs)
                    actual = backend.inference_callable()(*args, **kwargs)
                assert_outputs_close(actual, expected, self.rtol, self.atol, f"inference_callable at {which} shapes")
