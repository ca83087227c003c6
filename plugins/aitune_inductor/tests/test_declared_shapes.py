"""A declared sequence range on a BERT-style encoder, compiled by Inductor JIT.

Recorded at lengths 16, 32 and 64 and declared 1 to 512: calls at 8, 300 and 512 are
served by the compiled graph, with no compile after tuning, and match eager; 513 is
outside the declaration and runs eagerly.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_inductor import TorchInductorJitBackend
from aitune_inductor.compile_watch import CompileCounts

pytestmark = pytest.mark.slow

_names = itertools.count()


def test_jit_serves_the_declared_range_without_compiling_again() -> None:
    model = TinyEncoder().eval()
    seq = ait.DynamicDim("seq", min=1, max=512, opt=128)
    wrapped = ait.Module(model, f"inductor-declared-{next(_names)}", dynamic_shapes={"input_ids": {1: seq}})
    strategy = ait.OneBackendStrategy(TorchInductorJitBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [encoder_call(2, length)[1] for length in (16, 32, 64)], strategy=strategy)
    assert isinstance(wrapped.backends["0"], TorchInductorJitBackend)

    ait.config.fallback = "raise"  # a call not routed to the backend raises
    before = CompileCounts.now()
    with torch.no_grad():
        for length in (8, 300, 512):
            _, kwargs = encoder_call(2, length)
            torch.testing.assert_close(wrapped(**kwargs), model(**kwargs), rtol=1e-4, atol=1e-4)
    assert (CompileCounts.now() - before).frames == 0
    with pytest.raises(ait.UnsupportedCallError, match="outside the tuned range"):
        wrapped(**encoder_call(2, 513)[1])
