"""``model(x)`` returning one tensor reaches the infer request without flattening the call or rebuilding its output.

At batch 1 a small model's OpenVINO call is 0.1-0.3 ms, and those layers of Python
showed in the benchmarks; the shorter call must give exactly what the full one gives,
on every thread, and every other form of call must still take the full one.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
import torch
from openvino_helpers import served_by, tune_alone

import aitune_core as ait
from aitune_core.testing.exported import refuse_flattening
from aitune_core.testing.models import TinyCNN, TinyEncoder, cnn_call, encoder_call
from aitune_openvino import OpenVINOBackend


def cnn() -> tuple[torch.nn.Module, ait.Module, OpenVINOBackend]:
    torch.manual_seed(0)
    model = TinyCNN().eval()
    wrapped, _ = tune_alone(model, [cnn_call(1)[0][0][0] for _ in range(4)], batch_sizes=[1, 4])
    (backend,) = served_by(wrapped)
    assert isinstance(backend, OpenVINOBackend)
    return model, wrapped, backend


def test_a_lone_tensor_skips_flattening_and_gives_the_same_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    model, wrapped, backend = cnn()
    inputs = [cnn_call(batch)[0][0] for batch in (1, 3, 4)]
    inputs.append(inputs[-1].transpose(2, 3).contiguous().transpose(2, 3))  # the same values, not contiguous
    with torch.no_grad():
        full = [backend(x) for x in inputs]
        refuse_flattening(monkeypatch, backend)
        for x, expected in zip(inputs, full, strict=True):
            assert torch.equal(wrapped(x), expected)
            torch.testing.assert_close(wrapped(x), model(x))
        with pytest.raises(AssertionError, match="flattened"):
            backend.inference_callable()(images=inputs[0])  # a keyword call on its own takes the full path
    needs_grad = inputs[0].clone().requires_grad_()  # with grad on, numpy() refuses it undetached
    assert torch.equal(backend.inference_callable()(needs_grad), full[0])


def test_each_thread_gets_its_own_request_on_the_short_call() -> None:
    model, wrapped, _ = cnn()
    inputs = {batch: cnn_call(batch)[0][0] for batch in (1, 2, 3, 4)}
    with torch.no_grad():
        expected = {batch: model(x) for batch, x in inputs.items()}
    failures: list[str] = []

    def serve(batch: int) -> None:
        try:
            with torch.no_grad():
                for _ in range(20):
                    if not torch.allclose(wrapped(inputs[batch]), expected[batch], rtol=1e-4, atol=1e-5):
                        failures.append(f"batch {batch}: wrong outputs")
        except Exception as error:  # a request shared between threads raises (busy) rather than answering
            failures.append(f"batch {batch}: {error!r}")

    threads = [threading.Thread(target=serve, args=(batch,)) for batch in inputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_two_inputs_keep_the_full_path() -> None:
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    wrapped, _ = tune_alone(model, [encoder_call(2, length)[1] for length in (8, 16)])
    (backend,) = served_by(wrapped)
    assert backend.inference_callable() == backend._infer
    args, kwargs = encoder_call(2, 12)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(*args, **kwargs), model(*args, **kwargs), rtol=1e-4, atol=1e-5)


def test_a_restored_backend_takes_the_short_call_too(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model, wrapped, _ = cnn()
    checkpoint, name = ait.save(wrapped, tmp_path / "checkpoint"), wrapped.name
    del wrapped
    gc.collect()  # the name is free again once the tuned wrapper is gone
    loaded = ait.Module(TinyCNN().eval(), name)
    ait.load(loaded, checkpoint)
    (backend,) = served_by(loaded)
    refuse_flattening(monkeypatch, backend)
    (x,), _ = cnn_call(2)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
