"""``SCRIPT:FUNCTION``: the workload ``aitune inspect-model`` runs, named on the command line.

SCRIPT is a Python file or an importable module. FUNCTION takes no arguments and
returns what :func:`aitune_core.inspect` takes: ``(model_or_function, dataset)``, or a
dict of its keyword arguments (``{"func": model, "dataset": data, "batch_sizes": [1, 8]}``).
The script is the user's own code, run as they asked; its ``if __name__ == "__main__":``
block is not run.
"""

from __future__ import annotations

import importlib
import runpy
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class WorkloadError(ValueError):
    """SCRIPT:FUNCTION cannot be found, or its function returns something inspect cannot take."""


def load_workload(spec: str) -> dict[str, Any]:
    """The keyword arguments for :func:`aitune_core.inspect` that ``SCRIPT:FUNCTION`` gives."""
    script, separator, name = spec.rpartition(":")
    if not separator or not script or not name:
        raise WorkloadError(
            f"expected SCRIPT:FUNCTION, such as model.py:workload or mypkg.bench:workload, got {spec!r}"
        )
    if script.endswith(".py") or Path(script).is_file():
        if not Path(script).is_file():
            raise WorkloadError(f"no such script: {script}")
        namespace = runpy.run_path(script, run_name="aitune_inspect_workload")
    else:
        try:
            namespace = vars(importlib.import_module(script))
        except ImportError as error:
            raise WorkloadError(f"cannot import {script!r}: {error}") from error
    function = namespace.get(name)
    if not callable(function):
        defined = sorted(key for key, value in namespace.items() if callable(value) and not key.startswith("_"))
        raise WorkloadError(f"{script} has no function {name!r}; it defines {', '.join(defined[:12]) or 'none'}")
    returned = function()
    if isinstance(returned, Mapping):
        if "func" not in returned or "dataset" not in returned:
            raise WorkloadError(f"{name}() returned a dict without 'func' and 'dataset': {sorted(returned)}")
        return dict(returned)
    if isinstance(returned, tuple) and len(returned) == 2:
        return {"func": returned[0], "dataset": returned[1]}
    raise WorkloadError(
        f"{name}() must return (model_or_function, dataset) or a dict of inspect's arguments, "
        f"got {type(returned).__name__}"
    )
