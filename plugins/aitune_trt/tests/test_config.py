"""The config: defaults, checks when it is made, and its way through to_dict/JSON/from_dict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aitune_core.plugin_api import BackendState
from aitune_core.testing.engine import converter
from aitune_trt import ShapeRange, TensorRTBackend, TensorRTBackendConfig
from aitune_trt.backend import ENGINE_ARTIFACT, PROFILES_ARTIFACT
from aitune_trt.profiles import graph_profile, profiles_to_json

PROFILES = [{"x": ([1, 8], [4, 8], [8, 8])}, {"x": {"min": [9, 8], "opt": [16, 8], "max": [32, 8]}}]


def test_defaults() -> None:
    config = TensorRTBackendConfig()
    assert (config.precision, config.strongly_typed, config.tf32, config.cuda_graphs) == ("fp32", None, False, False)
    assert config.resolved_profile_source == "graph"
    assert config.export_config().exporter == "dynamo"
    assert TensorRTBackend().describe() == "TensorRTBackend()"


def test_profiles_given_mean_config_profiles() -> None:
    config = TensorRTBackendConfig(profiles=PROFILES)
    assert config.resolved_profile_source == "config"
    assert config.profiles == (
        {"x": ShapeRange([1, 8], [4, 8], [8, 8])},
        {"x": ShapeRange([9, 8], [16, 8], [32, 8])},
    )


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"precision": "int8"}, ValueError, "precision"),
        ({"strongly_typed": 1}, TypeError, "strongly_typed"),
        ({"workspace_bytes": 0}, ValueError, "workspace_bytes must be a whole number >= 1"),
        ({"optimization_level": 6}, ValueError, "optimization_level must be a whole number between 0 and 5"),
        ({"profile_source": "everything"}, ValueError, "profile_source"),
        ({"profile_source": "config"}, ValueError, "needs at least one profile"),
        ({"profile_source": "samples", "profiles": PROFILES}, ValueError, "would ignore them"),
        ({"profiles": {"x": ([1], [1], [1])}}, TypeError, "a list of dicts"),
        ({"profiles": [{"x": ([1], [1])}]}, TypeError, "a shape range is"),
        ({"max_sample_profiles": 0}, ValueError, "max_sample_profiles"),
        ({"exporter": "tracing"}, ValueError, "exporter"),
    ],
)
def test_bad_configs_fail_when_made(overrides: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        TensorRTBackendConfig(**overrides)


def test_config_round_trips_through_json() -> None:
    config = TensorRTBackendConfig(precision="bf16", strongly_typed=True, workspace_bytes=2 << 30, profiles=PROFILES)
    data = json.loads(json.dumps(converter().unstructure(config)))
    assert data["profiles"][1] == {"x": {"min": [9, 8], "opt": [16, 8], "max": [32, 8]}}
    assert converter().structure(data, TensorRTBackendConfig) == config


def test_keys_follow_the_config() -> None:
    assert TensorRTBackend().key() == TensorRTBackend().key()
    assert TensorRTBackend(precision="fp16").key() != TensorRTBackend().key()
    assert TensorRTBackend(profiles=PROFILES).key() == TensorRTBackend(profiles=PROFILES).key()
    assert TensorRTBackend(profiles=PROFILES).key() != TensorRTBackend(profiles=PROFILES[:1]).key()
    assert TensorRTBackend(precision="fp16", cuda_graphs=True).describe() == (
        "TensorRTBackend(precision='fp16',cuda_graphs=True)"
    )


def test_backend_with_config_and_profiles_round_trips_through_json(mlp_context: Any, tmp_path: Path) -> None:
    """A checkpoint's view of a backend: config, the plan and profiles artifacts, the layout; no TensorRT needed."""
    profiles_file = tmp_path / "profiles.json"
    profiles_file.write_text(profiles_to_json([graph_profile(mlp_context.graph_spec)]))
    plan_file = tmp_path / "engine.plan"
    plan_file.write_bytes(b"plan")
    data = {
        "config": converter().unstructure(TensorRTBackendConfig(precision="fp16", profiles=PROFILES)),
        "artifacts": {ENGINE_ARTIFACT: str(plan_file), PROFILES_ARTIFACT: str(profiles_file)},
        "extra": {"layout": None, "output_dtypes": ["torch.float32"], "precision": "fp16", "tensorrt": "10.8.0"},
    }
    restored = TensorRTBackend.from_dict(json.loads(json.dumps(data)))
    assert restored.state is BackendState.CHECKPOINT_LOADED
    assert restored.config.precision == "fp16" and restored.config.profiles[0]["x"].max == (8, 8)
    assert restored.profiles == [graph_profile(mlp_context.graph_spec)]
    again = json.loads(json.dumps(restored.to_dict(), default=str))
    assert again["config"] == data["config"]
    assert again["artifacts"] == data["artifacts"]
    assert again["extra"] == data["extra"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"precision": "int4"}, "precision"),
        ({"tf32": "true"}, "expected true or false, got str 'true' @ config.tf32"),
        ({"strongly_typed": 0}, "expected true or false, got int 0 @ config.strongly_typed"),
        ({"workspace_bytes": True}, "expected a whole number, got bool True @ config.workspace_bytes"),
        ({"workspace_bytes": "1024"}, "expected a whole number, got str '1024' @ config.workspace_bytes"),
        ({"optimization_level": 9}, "optimization_level must be a whole number between 0 and 5"),
        ({"max_sample_profiles": 2.5}, "expected a whole number, got float 2.5 @ config.max_sample_profiles"),
        ({"profiles": [{"x": {"min": [1, True], "opt": [1, 8], "max": [1, 8]}}]}, "expected a whole number"),
        ({"exporter": 3}, "expected a string, got int 3 @ config.exporter"),
    ],
)
def test_stored_configs_of_the_wrong_type_are_refused(config: dict[str, Any], message: str) -> None:
    """A checkpoint's config is data: no field is coerced (``bool("false")`` is True) on the way in."""
    with pytest.raises(ValueError, match=message):
        TensorRTBackend.from_dict({"config": config, "artifacts": {}, "extra": {}})


def test_unsafe_options_is_never_stored() -> None:
    backend = TensorRTBackend(precision="fp16", unsafe_options=True)
    assert "unsafe_options" not in backend.to_dict()["config"]
    assert backend.key() == TensorRTBackend(precision="fp16").key()
