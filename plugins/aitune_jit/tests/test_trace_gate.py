"""While tuning runs, an FX trace in one thread does not capture modules another thread is serving."""

from __future__ import annotations

import threading

import torch

from aitune_jit.trace_gate import TRACE_GATE


class Traced(torch.nn.Module):
    """Its forward waits until the serving thread has made its calls, so they overlap the trace."""

    def __init__(self, started: threading.Event, served: threading.Event) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.started = started
        self.served = served

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.started.set()  # the trace has patched nn.Module.__call__ by now
        assert self.served.wait(timeout=30)
        return self.linear(x)


def serve_during_trace(started: threading.Event, served: threading.Event, errors: list[str]) -> None:
    other = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    started.wait(timeout=30)
    for _ in range(20):
        try:
            other(torch.randn(2, 4))
        except Exception as error:  # what an FX trace's patch does to a call from another thread
            errors.append(repr(error))
    served.set()


def trace_while_serving() -> tuple[list[str], torch.fx.GraphModule]:
    started, served, errors = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=serve_during_trace, args=(started, served, errors))
    thread.start()
    try:
        traced = torch.fx.symbolic_trace(Traced(started, served))
    finally:
        thread.join()
    return errors, traced


def test_other_threads_calls_run_their_modules_during_a_trace() -> None:
    with TRACE_GATE.guarding():
        assert not TRACE_GATE.active  # serving calls never wait on a gate
        errors, traced = trace_while_serving()
    assert errors == []
    assert [node.op for node in traced.graph.nodes] == ["placeholder", "call_module", "output"]


def test_without_it_the_trace_takes_them() -> None:
    """The failure the scoping prevents, so that the test above can fail."""
    errors, _ = trace_while_serving()
    assert errors and "not installed as a submodule" in errors[0]


def test_the_patcher_is_put_back() -> None:
    from torch.fx._symbolic_trace import _Patcher

    before = (_Patcher.patch_method, _Patcher.patch)
    with TRACE_GATE.guarding():
        assert _Patcher.patch_method is not before[0]
    assert (_Patcher.patch_method, _Patcher.patch) == before
