"""A checkpoint whose manifest sets Inductor options that run commands is refused before anything compiles.

The manifest names a backend and its config as JSON. ``torch.compile`` recompiles
a JIT backend when it is loaded, and Inductor runs ``cpp.cxx`` as the compiler and
puts ``cpp.enable_floating_point_contract_flag`` on its command line, so either
option would run the checkpoint writer's command. Nothing here compiles: the refusal
must come from restoring the config.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from aitune_core.testing.engine import get_backend_class
from aitune_inductor import TorchInductorJitBackend


def manifest_backend(config: dict[str, Any]) -> dict[str, Any]:
    """A backend entry as a manifest holds it, through JSON text."""
    return json.loads(json.dumps({"name": "inductor_jit", "config": config, "artifacts": {}, "extra": {}}))


def flag_payload(canary: Path) -> dict[str, Any]:
    return {"options": {"cpp.enable_floating_point_contract_flag": f"off -wrapper 'sh,-c,touch {canary}'"}}


def compiler_payload(canary: Path, folder: Path) -> dict[str, Any]:
    script = folder / "cxx.sh"
    script.write_text(f'#!/bin/sh\ntouch {canary}\nexec g++ "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"options": {"cpp.cxx": str(script)}}


@pytest.mark.parametrize("payload", ["flag", "compiler"])
def test_manifest_options_that_run_commands_are_refused_at_load(payload: str, tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    config = flag_payload(canary) if payload == "flag" else compiler_payload(canary, tmp_path)
    key = next(iter(config["options"]))
    entry = manifest_backend(config)
    backend_class = get_backend_class(entry["name"])
    assert backend_class is TorchInductorJitBackend
    with pytest.raises(ValueError, match=rf"options\['{key}'\] is not an allowed Inductor option") as refused:
        backend_class.from_dict({"config": entry["config"], "artifacts": entry["artifacts"], "extra": entry["extra"]})
    assert "unsafe_options=True" in str(refused.value)
    assert not canary.exists()


def test_a_manifest_cannot_turn_unsafe_options_on(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    entry = manifest_backend({**flag_payload(canary), "unsafe_options": True})
    with pytest.raises(ValueError, match="sets unsafe_options, which is only accepted in code"):
        TorchInductorJitBackend.from_dict({"config": entry["config"]})
    assert not canary.exists()


def test_the_payload_hidden_among_allowed_options_is_still_refused(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    config = {"options": {"max_autotune": True, "cpp.threads": 2, **compiler_payload(canary, tmp_path)["options"]}}
    with pytest.raises(ValueError, match=r"options\['cpp.cxx'\]") as refused:
        TorchInductorJitBackend.from_dict({"config": manifest_backend(config)["config"]})
    assert "max_autotune" not in str(refused.value)
    assert not canary.exists()
