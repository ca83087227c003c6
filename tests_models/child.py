"""The fresh process of the checkpoint test: ``python child.py CASE CHECKPOINT EXPECTED``.

Builds the case's model with other random weights (``CHILD_SEED``), ``ait.load``s the
checkpoint into it, and runs the inputs saved in ``EXPECTED``, a ``torch.save`` file
written by the test: the inputs, and the eager reference's outputs as
:func:`model_cases.leaves` (plain tensors, which load with ``weights_only=True``).
Probes must be routed to the loaded backends and match eager within the case's
tolerance (generated tokens exactly); fallbacks must run the original module and
match eager bit for bit. Prints ``ok``. Any failed check raises, so the exit status
tells the test.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import model_cases
import torch

import aitune_core as ait


def main(name: str, checkpoint: str, expected_file: str) -> None:
    case = model_cases.CASES[name]
    expected = torch.load(expected_file, weights_only=True)
    model = case.build(model_cases.CHILD_SEED)
    loaded = ait.load(model, checkpoint, trust_native_code=True)
    assert isinstance(loaded, ait.Module), f"load returned a {type(loaded).__name__}, not the tuned wrapper"
    assert len(loaded.routes) == case.graphs, f"{len(loaded.routes)} routes loaded, {case.graphs} tuned"
    assert not any(module.training for module in loaded.modules()), "the loaded model is not in eval mode"
    with torch.no_grad():
        for index, (inputs, outputs) in enumerate(zip(expected["probes"], expected["probe_outputs"], strict=True)):
            with model_cases.counting(loaded) as counts:
                got = case.call(loaded, inputs)
            what = f"probe {index} after loading"
            assert counts.calls > 0 and counts.routed == counts.calls, f"{what}: {counts}"
            model_cases.assert_same_leaves(list(model_cases.leaves(got)), outputs, False, case.rtol, case.atol, what)
        for why, inputs, outputs in zip(
            expected["fallback_reasons"], expected["fallbacks"], expected["fallback_outputs"], strict=True
        ):
            with model_cases.counting(loaded) as counts:
                got = case.call(loaded, inputs)
            what = f"fallback ({why}) after loading"
            assert counts.calls > 0 and counts.routed == 0 and counts.eager == counts.calls, f"{what}: {counts}"
            model_cases.assert_same_leaves(list(model_cases.leaves(got)), outputs, True, 0.0, 0.0, what)
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
