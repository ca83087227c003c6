"""A stand-in for the ``ray`` module: records what the executor submits and answers what the test says.

Tests that need no Ray install it with the ``fake_ray`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any


class FakeRayError(Exception):
    pass


class FakeRemote:
    """What ``ray.remote(...)(function)`` gives: records its options and runs nothing."""

    def __init__(self, ray: FakeRay, function: Any, options: dict[str, Any]) -> None:
        self.ray, self.function, self.decorator_options = ray, function, options

    def options(self, **options: Any) -> FakeRemote:
        self.ray.submitted_options.append(options)
        return self

    def remote(self, payload: Any, candidate: dict[str, Any]) -> Iterator[Any]:
        self.ray.submitted_candidates.append(candidate)
        return iter(self.ray.answers)


class FakeRay(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("ray")
        self.exceptions = types.SimpleNamespace(
            RayError=FakeRayError,
            TaskCancelledError=type("TaskCancelledError", (FakeRayError,), {}),
            OutOfMemoryError=type("OutOfMemoryError", (FakeRayError,), {}),
            NodeDiedError=type("NodeDiedError", (FakeRayError,), {}),
        )
        self.initialized = True
        self.init_options: dict[str, Any] = {}
        self.live_nodes: list[dict[str, Any]] = []
        """What ``ray.nodes()`` says."""
        self.submitted_options: list[dict[str, Any]] = []
        self.submitted_candidates: list[dict[str, Any]] = []
        self.remotes: list[FakeRemote] = []
        self.answers: list[Any] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **options: Any) -> None:
        self.initialized, self.init_options = True, options

    def shutdown(self) -> None:
        self.initialized = False

    def nodes(self) -> list[dict[str, Any]]:
        return self.live_nodes

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, **options: Any) -> Any:
        def decorate(function: Any) -> FakeRemote:
            self.remotes.append(FakeRemote(self, function, options))
            return self.remotes[-1]

        return decorate

    def wait(self, refs: list[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
        return refs, []

    def get(self, value: Any, timeout: float | None = None) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    def put(self, value: Any) -> Any:
        return value

    def cancel(self, ref: Any, force: bool = False) -> None:
        pass
