"""A bounded HTTP load generator for a served model: a fixed count of requests at a fixed concurrency.

``concurrency`` client threads, each on a keep-alive connection to 127.0.0.1, take the
next of ``count`` requests until none is left, so the run stops by itself; a request
that gets no answer within ``TIMEOUT_S`` counts as failed, never waited on longer.
Each answer is checked against the expected outputs (eager's, computed beforehand) at
the float32 tolerances tuning validates with. An optional ``interruption`` runs once,
after a given number of answers, on its own thread (killing a replica, say), and the
number of requests in flight at that moment is recorded.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import torch

from aitune_core.plugin_api import Tolerances, compare_outputs

TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Request:
    """One request's body and the outputs its answer must match."""

    body: bytes
    expected: torch.Tensor


@dataclass(frozen=True)
class Interruption:
    """``action`` runs once, on its own thread, when ``after`` answers have come back."""

    after: int
    action: Callable[[], None]


@dataclass
class LoadRun:
    """What a bounded run saw: each answered request's latency, the failures, the wrong answers."""

    latencies_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    in_flight_at_interruption: int | None = None

    @property
    def answered(self) -> int:
        return len(self.latencies_s)

    @property
    def throughput(self) -> float:
        """Answered requests per second of the whole run."""
        return self.answered / self.wall_s if self.wall_s else 0.0


class _State:
    """The counters the client threads share, under one lock."""

    def __init__(self, count: int, interruption: Interruption | None) -> None:
        self.lock = threading.Lock()
        self.next_index = 0
        self.count = count
        self.in_flight = 0
        self.done = 0
        self.interruption = interruption
        self.fired: threading.Thread | None = None

    def take(self) -> int | None:
        with self.lock:
            if self.next_index >= self.count:
                return None
            self.next_index += 1
            self.in_flight += 1
            return self.next_index - 1

    def finish(self, run: LoadRun) -> None:
        with self.lock:
            self.in_flight -= 1
            self.done += 1
            due = self.interruption is not None and self.fired is None and self.done >= self.interruption.after
            if due:
                assert self.interruption is not None
                run.in_flight_at_interruption = self.in_flight
                self.fired = threading.Thread(target=self.interruption.action, name="interruption")
                self.fired.start()


def run_load(
    url: str,
    requests: Sequence[Request],
    count: int,
    concurrency: int,
    interruption: Interruption | None = None,
) -> LoadRun:
    """Send ``count`` requests (cycling through ``requests``), ``concurrency`` at a time; see the module docstring."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the load generator sends to loopback only, not {host}")
    state = _State(count, interruption)
    run = LoadRun()
    tolerances = Tolerances()

    def client() -> None:
        connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
        try:
            while (index := state.take()) is not None:
                request = requests[index % len(requests)]
                start = time.perf_counter()
                try:
                    connection.request("POST", path, body=request.body, headers={"Content-Type": "application/json"})
                    answer = connection.getresponse()
                    payload = answer.read()
                except (OSError, http.client.HTTPException) as error:
                    connection.close()  # a fresh connection for the next request
                    with state.lock:
                        run.failures.append(f"request {index}: {type(error).__name__}: {error}")
                    state.finish(run)
                    continue
                took = time.perf_counter() - start
                problem = _problem(answer.status, payload, request.expected, tolerances)
                with state.lock:
                    if answer.status != 200:
                        run.failures.append(f"request {index}: {problem}")
                    else:
                        run.latencies_s.append(took)
                        if problem is not None:
                            run.mismatches.append(f"request {index}: {problem}")
                state.finish(run)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, name=f"client-{n}") for n in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.wall_s = time.perf_counter() - start
    if state.fired is not None:
        state.fired.join()
    return run


def _problem(status: int, payload: bytes, expected: torch.Tensor, tolerances: Tolerances) -> str | None:
    """Why an answer is not the expected one, or None."""
    if status != 200:
        return f"HTTP {status}: {payload[:300]!r}"
    try:
        outputs = torch.tensor(json.loads(payload)["outputs"], dtype=expected.dtype)
    except (ValueError, KeyError, TypeError) as error:
        return f"unreadable answer ({error})"
    comparison = compare_outputs(outputs, expected, tolerances)
    return comparison.problem
