"""With every installed plugin and no backends named, tuning keeps eager's numbers.

This is the promise a user relies on when they install plugins and call ``tune()``
without choosing anything: whichever candidate wins, its outputs on inputs it never saw
match eager within the float32 tolerances a lossless backend is held to. It builds every
installed CPU candidate (Inductor compiles here), so the model is tiny and the batch
sizes few.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import aitune_core as ait
from aitune_core.backends.tolerances import DEFAULT_TOLERANCES
from aitune_core.demo.models import DemoMLP
from aitune_core.testing.timing import SHORT_PROFILE

pytestmark = pytest.mark.together  # every installed plugin's default candidates



def test_defaults_match_eager_on_fresh_inputs(unique_name: Callable[[str], str]) -> None:
    model = DemoMLP(width=16, hidden=32).eval()
    wrapped = ait.Module(model, unique_name("mlp"))
    dataset = [torch.randn(16) for _ in range(4)]
    report = ait.tune(wrapped, dataset, batch_sizes=[1, 2], strategy=ait.MaxThroughputStrategy(profile=SHORT_PROFILE))

    for graph in report.graphs:
        for row in graph.candidates:
            backend = row.instance or row.blueprint
            if row.status != "skipped" and backend is not None:
                assert not backend.lossy, f"{row.backend} was tried although nobody asked for lossy backends"

    tolerance = DEFAULT_TOLERANCES[torch.float32]
    generator = torch.Generator().manual_seed(1234)  # not the tuning data
    for batch_size in (1, 2, 2, 1):
        x = torch.randn(batch_size, 16, generator=generator)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(x), model(x), atol=tolerance.atol, rtol=tolerance.rtol)
