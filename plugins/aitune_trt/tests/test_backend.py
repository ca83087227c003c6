"""The backend's build, run and checkpoint paths, with ONNX Runtime standing in for TensorRT.

:class:`aitune_trt.testing.OrtTensorRTBackend` is the real backend with its three
TensorRT steps (capabilities, plan build, engine load) replaced by ONNX Runtime on the
exported model. These tests check aitune-trt's orchestration (profiles, export, file
layout, artifacts, profile selection, restoring without a build), not TensorRT.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch

from aitune_core.plugin_api import BackendState, BuildContext, walk_outputs
from aitune_core.testing.models import nested_call, tagger_call
from aitune_core.testing.recording import at_shape
from aitune_onnx.dims import read_dims
from aitune_trt import OutOfProfileError, ProfileError, TensorRTBackend, TensorRTBuildError
from aitune_trt.backend import ENGINE_ARTIFACT, MODEL_FILE, PLAN_FILE, PROFILES_ARTIFACT, PROFILES_FILE
from aitune_trt.errors import ParserIssue
from aitune_trt.options import BuildOptions, BuildResult
from aitune_trt.runner import TensorRTRunner
from aitune_trt.testing import TENSORRT_11, OrtEngine, OrtTensorRTBackend

pytestmark = pytest.mark.slow


def _context(context: BuildContext, folder: Path) -> BuildContext:
    """The recorded context with a cache folder of this test's own."""
    return BuildContext(
        context.module,
        context.module_name,
        context.graph_spec,
        context.samples,
        context.device,
        folder,
        context.signature,
    )


def _engine(backend: TensorRTBackend) -> OrtEngine:
    runner = backend.runner
    assert isinstance(runner, TensorRTRunner) and isinstance(runner.session, OrtEngine)
    return runner.session


def _leaves(value: Any) -> list[Any]:
    return [leaf for _, leaf in walk_outputs(value)]


def _assert_matches_eager(context: BuildContext, backend: TensorRTBackend) -> None:
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            actual, expected = _leaves(backend(*args, **kwargs)), _leaves(context.module(*args, **kwargs))
        assert [type(leaf) for leaf in actual] == [type(leaf) for leaf in expected]
        for got, wanted in zip(actual, expected, strict=True):
            if isinstance(wanted, torch.Tensor):
                torch.testing.assert_close(got, wanted, rtol=1e-4, atol=1e-5)
            else:
                assert got == wanted


@pytest.fixture(scope="module")
def tagger_backend(tagger_context: BuildContext, tmp_path_factory: pytest.TempPathFactory) -> OrtTensorRTBackend:
    backend = OrtTensorRTBackend(profile_source="samples")
    backend.build(_context(tagger_context, tmp_path_factory.mktemp("tagger-build")))
    return backend


def test_the_export_has_symbolic_batch_and_sequence_named_as_the_profiles(
    tagger_backend: OrtTensorRTBackend,
) -> None:
    exported = tagger_backend.exported
    assert exported is not None and exported.path.name == MODEL_FILE
    inputs, outputs = read_dims(onnx.load(str(exported.path)))
    assert inputs == {"tokens": ["batch", "tokens_dim1", 8], "mask": ["batch", "tokens_dim1"]}
    assert outputs == {"output": ["batch", "tokens_dim1", 8]}
    for profile in tagger_backend.profiles:
        assert profile.names == exported.input_names == {"tokens": "tokens", "mask": "mask"}
        assert [entry.name for entry in profile.inputs] == list(inputs)


def test_the_build_writes_plan_profiles_and_onnx_into_the_cache_folder(tagger_backend: OrtTensorRTBackend) -> None:
    assert tagger_backend.context is not None
    folder = tagger_backend.context.cache_dir
    assert sorted(path.name for path in folder.iterdir()) == sorted([MODEL_FILE, PLAN_FILE, PROFILES_FILE])
    assert tagger_backend.to_dict()["artifacts"] == {
        ENGINE_ARTIFACT: folder / PLAN_FILE,
        PROFILES_ARTIFACT: folder / PROFILES_FILE,
    }
    options = tagger_backend.last_options
    assert options is not None and options.timing_cache == folder / "timing.cache"
    assert options.precision.describe() == "fp32 (weakly typed)"
    info = tagger_backend.build_info
    assert info["tensorrt"] == "10.8.0" and info["plan_bytes"] > 0
    assert info["profiles"].startswith("0: sample: tokens=[2, 3, 8], mask=[2, 3]; 1: sample")
    assert info["profiles"].endswith("3: graph: tokens=[2, 3, 8]..[8, 6, 8]..[8, 9, 8], mask=[2, 3]..[8, 6]..[8, 9]")


def test_recorded_shapes_take_their_own_profile_and_others_the_graphs(
    tagger_backend: OrtTensorRTBackend, tagger_context: BuildContext
) -> None:
    engine = _engine(tagger_backend)
    engine.profiles_used.clear()
    for batch in (2, 4, 8):
        args, _ = tagger_call(batch)
        with torch.no_grad():
            torch.testing.assert_close(tagger_backend(*args), tagger_context.module(*args), rtol=1e-4, atol=1e-5)
    tokens = torch.randn(3, 7, 8)
    with torch.no_grad():
        tagger_backend(tokens, torch.ones(3, 7))
    assert engine.profiles_used == [0, 1, 2, 3]


def test_matches_eager_at_min_opt_max(tagger_backend: OrtTensorRTBackend, tagger_context: BuildContext) -> None:
    _assert_matches_eager(tagger_context, tagger_backend)


def test_nested_outputs_are_rebuilt(nested_context: BuildContext, tmp_path: Path) -> None:
    backend = OrtTensorRTBackend().build(_context(nested_context, tmp_path))
    args, kwargs = nested_call(4)
    result = backend(*args, **kwargs)
    assert result["tag"] == "nested" and isinstance(result["extra"], tuple)
    _assert_matches_eager(nested_context, backend)
    assert backend.profiles[0].names == {"values[0]": "values_0", 'values[1]["pairs"]': "values_1_pairs"}


def test_narrow_config_profiles_refuse_calls_they_do_not_cover(mlp_context: BuildContext, tmp_path: Path) -> None:
    backend = OrtTensorRTBackend(profiles=[{"x": ([2, 8], [4, 8], [4, 8])}], cover_tuned_range=False)
    backend.build(_context(mlp_context, tmp_path))
    engine = _engine(backend)
    backend(torch.randn(3, 8))
    with pytest.raises(OutOfProfileError, match=r"x=\[6, 8\]"):
        backend(torch.randn(6, 8))
    assert engine.profiles_used == [0]


def test_bad_config_profiles_fail_the_build_before_any_export(mlp_context: BuildContext, tmp_path: Path) -> None:
    backend = OrtTensorRTBackend(profiles=[{"x": ([2, 8], [4, 8], [8, 16])}])
    with pytest.raises(ProfileError, match="axis 1 is static, always 8"):
        backend.build(_context(mlp_context, tmp_path))
    assert backend.state is BackendState.INIT
    assert not (tmp_path / MODEL_FILE).exists()


def test_a_tensorrt_build_error_fails_the_build(mlp_context: BuildContext, tmp_path: Path) -> None:
    class Refusing(OrtTensorRTBackend):
        def _build_plan(self, onnx_path: Path, options: BuildOptions) -> BuildResult:
            raise TensorRTBuildError(
                "parse",
                "TensorRT's ONNX parser rejected model.onnx",
                [ParserIssue("no importer for op Foo", "UNSUPPORTED_NODE", 3, "/foo/Foo", "Foo")],
                [("WARNING", "using an older opset"), ("ERROR", "In node 3 (/foo/Foo): no importer")],
            )

    backend = Refusing()
    with pytest.raises(TensorRTBuildError) as raised:
        backend.build(_context(mlp_context, tmp_path))
    message = str(raised.value)
    assert "UNSUPPORTED_NODE: no importer for op Foo at node /foo/Foo (Foo)" in message
    assert "[ERROR] In node 3 (/foo/Foo): no importer" in message
    assert "older opset" not in message, "warnings are left out when there are errors"
    assert backend.state is BackendState.INIT


def test_build_error_shows_warnings_when_there_is_no_error() -> None:
    error = TensorRTBuildError("build", "TensorRT could not build the engine", messages=[("WARNING", "out of\nmemory")])
    assert str(error) == "TensorRT could not build the engine\nTensorRT said:\n  [WARNING] out of memory"


def test_strong_typing_exports_in_half_precision_on_tensorrt_11(mlp_context: BuildContext, tmp_path: Path) -> None:
    class TensorRT11(OrtTensorRTBackend):
        capabilities = TENSORRT_11

    backend = TensorRT11(precision="fp16").build(_context(mlp_context, tmp_path))
    assert backend.last_options is not None
    assert backend.last_options.precision.describe() == "fp16 (strongly typed, exported in float16)"
    model = onnx.load(str(tmp_path / MODEL_FILE))
    assert {t.data_type for t in model.graph.initializer if len(t.dims) == 2} == {onnx.TensorProto.FLOAT16}
    x = torch.randn(4, 8)
    out = backend(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, mlp_context.module(x), rtol=1e-2, atol=1e-2)
    assert backend.default_tolerances().for_dtype(torch.float32).atol == 1e-2


# ---------------------------------------------------------------------- checkpoints
def _round_trip(backend: TensorRTBackend, folder: Path) -> TensorRTBackend:
    """to_dict -> JSON -> from_dict, with the artifacts copied elsewhere first."""
    data = json.loads(json.dumps(backend.to_dict(), default=str))
    folder.mkdir()
    for name, path in data["artifacts"].items():
        data["artifacts"][name] = str(shutil.copy(path, folder / f"{name}-{Path(path).name}"))
    return type(backend).from_dict(data)


def test_checkpoint_round_trip_deploys_without_building(
    tagger_backend: OrtTensorRTBackend, tagger_context: BuildContext, tmp_path: Path
) -> None:
    built = OrtTensorRTBackend.plans_built
    opened = OrtTensorRTBackend.engines_opened
    restored = _round_trip(tagger_backend, tmp_path / "restored")
    assert restored.state is BackendState.CHECKPOINT_LOADED
    assert restored.config == tagger_backend.config and restored.key() == tagger_backend.key()
    assert restored.profiles == tagger_backend.profiles
    restored.deploy()  # no BuildContext: the signature comes from the stored layout
    assert restored.state is BackendState.DEPLOYED
    assert OrtTensorRTBackend.plans_built == built and OrtTensorRTBackend.engines_opened == opened + 1
    args, _ = tagger_call(4)
    with torch.no_grad():
        torch.testing.assert_close(restored(*args), tagger_context.module(*args), rtol=1e-4, atol=1e-5)
    extra = restored.to_dict()["extra"]
    assert extra["precision"] == "fp32 (weakly typed)" and extra["tensorrt"] == "10.8.0"
    assert extra["output_dtypes"] == ["torch.float32"]


def test_the_profiles_artifact_is_cattrs_json(tagger_backend: OrtTensorRTBackend) -> None:
    payload = json.loads(tagger_backend.to_dict()["artifacts"][PROFILES_ARTIFACT].read_text())
    assert payload["format"] == 1
    assert [profile["source"] for profile in payload["profiles"]] == ["sample", "sample", "sample", "graph"]


def test_a_checkpoint_without_its_profiles_is_refused(tagger_backend: OrtTensorRTBackend) -> None:
    data = tagger_backend.to_dict()
    del data["artifacts"][PROFILES_ARTIFACT]
    with pytest.raises(ValueError, match="no 'profiles' artifact"):
        OrtTensorRTBackend.from_dict(data)


def test_profiles_that_disagree_with_the_engine_are_refused(tagger_backend: OrtTensorRTBackend, tmp_path: Path) -> None:
    data = json.loads(json.dumps(tagger_backend.to_dict(), default=str))
    profiles = json.loads(Path(data["artifacts"][PROFILES_ARTIFACT]).read_text())
    profiles["profiles"] = profiles["profiles"][1:]
    other = tmp_path / "profiles.json"
    other.write_text(json.dumps(profiles))
    data["artifacts"][PROFILES_ARTIFACT] = str(other)
    restored = OrtTensorRTBackend.from_dict(data)
    with pytest.raises(RuntimeError, match="the engine has 4 optimization profiles, but 3 are recorded"):
        restored.deploy()


def test_deactivate_releases_the_engine(mlp_context: BuildContext, tmp_path: Path) -> None:
    backend = OrtTensorRTBackend().build(_context(mlp_context, tmp_path))
    backend.deactivate()
    assert backend.runner is None
    backend.activate(_context(mlp_context, tmp_path))
    assert OrtTensorRTBackend.plans_built == 1 and OrtTensorRTBackend.engines_opened == 2
    backend(torch.randn(2, 8))
