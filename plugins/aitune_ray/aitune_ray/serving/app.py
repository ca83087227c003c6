"""The Ray Serve application: replicas that load a checkpoint and answer batched HTTP requests.

Each replica builds the user's model with their factory and loads the checkpoint into
it (``ait.load``), so calls take the tuned routes. Requests are decoded as they come
(:mod:`aitune_ray.serving.wire`; a bad one is answered at once with its 4xx) and queued
with ``@serve.batch``, which hands the queue to the model in batches of at most
``max_batch_size`` rows (the largest batch tuning built for), waiting at most
``batch_wait_timeout_s`` for a batch to fill. Requests of one shape are stacked into
one call; the model runs on one thread of its own, so requests keep being queued
while it computes. Importing this module imports Ray Serve.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import torch
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse
from torch import nn

import aitune_core as ait
from aitune_ray.serving.factory import build_model
from aitune_ray.serving.settings import ReplicaSetup
from aitune_ray.serving.wire import BadRequest, Job, decode, encode, split, stack

DEPLOYMENT_NAME = "aitune"
UNPROCESSABLE = 422


@attrs.frozen
class Rejected:
    """A request whose call raised: what the client is told, with status 422."""

    message: str


@attrs.define
class Counts:
    """What a replica served: the batching is visible in ``model_calls`` against ``requests``."""

    requests: int = 0
    rows: int = 0
    model_calls: int = 0
    largest_call_rows: int = 0
    rejected: int = 0


def load_model(setup: ReplicaSetup) -> nn.Module:
    """The user's model with the checkpoint loaded; with ``setup.eager``, its own modules with those weights."""
    model = build_model(setup.factory)
    loaded = ait.load(model, setup.checkpoint, device_map=setup.device_map, trust_native_code=setup.trust_native_code)
    if not setup.eager:
        return loaded
    if isinstance(loaded, ait.Module):  # the model itself was the tuned module
        loaded.deactivate()
        return loaded.module
    ait.unwrap(loaded)
    return loaded


def _rows(jobs: list[Job]) -> int:
    """``@serve.batch`` counts a batch in rows, not requests: a request may carry several."""
    return sum(job.rows for job in jobs)


class CheckpointReplica:
    """One replica of the application (see the module docstring)."""

    def __init__(self, setup: ReplicaSetup) -> None:
        self.setup = setup
        if setup.threads is not None:
            torch.set_num_threads(setup.threads)
        self.model = load_model(setup)
        self.device = torch.device(setup.device_map or "cpu")
        self.counts = Counts()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aitune-serve")
        batcher: Any = self.run_batch  # what @serve.batch made of it, typed or not by the installed Ray
        batcher.set_max_batch_size(setup.max_batch_size)
        batcher.set_batch_wait_timeout_s(setup.batch_wait_timeout_s)

    async def __call__(self, request: Request) -> Any:
        if request.method == "GET":
            return self.stats()
        if request.method != "POST":
            return JSONResponse({"error": f"{request.method} is not served: POST inputs, or GET the stats"}, 405)
        try:
            job = decode(await request.body(), self.setup.max_batch_size)
        except BadRequest as error:
            self.counts.rejected += 1
            return JSONResponse({"error": error.message}, status_code=error.status)
        answer = await self.run_batch(job)
        if isinstance(answer, Rejected):
            self.counts.rejected += 1
            return JSONResponse({"error": answer.message}, status_code=UNPROCESSABLE)
        return {"outputs": answer}

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0, batch_size_fn=_rows)
    async def run_batch(self, jobs: list[Job]) -> list[Any]:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._run, jobs)

    def _run(self, jobs: Sequence[Job]) -> list[Any]:
        """Every job's answer: jobs of one signature are stacked into one call, each group on its own."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, job in enumerate(jobs):
            groups.setdefault(job.signature(), []).append(index)
        answers: list[Any] = [None] * len(jobs)
        for members in groups.values():
            group = [jobs[index] for index in members]
            for index, answer in zip(members, self._call(group), strict=True):
                answers[index] = answer
        return answers

    def _call(self, jobs: Sequence[Job]) -> list[Any]:
        rows = [job.rows for job in jobs]
        self.counts.requests += len(jobs)
        self.counts.rows += sum(rows)
        self.counts.model_calls += 1
        self.counts.largest_call_rows = max(self.counts.largest_call_rows, sum(rows))
        try:
            inputs = [tensor.to(self.device) for tensor in stack(jobs)]
            with torch.no_grad():
                outputs = self.model(*inputs)
            return [encode(part) for part in split(outputs, rows)]
        except Exception as error:  # the inputs do not fit the model: the requests of this call are told why
            text = " ".join(str(error).split())[:2000]
            return [Rejected(f"the model could not take these inputs: {type(error).__name__}: {text}")] * len(jobs)

    def stats(self) -> dict[str, Any]:
        """How this replica is set up and what it served (``GET /``, or a handle's ``stats``)."""
        return {
            "serving": "eager" if self.setup.eager else "tuned",
            "max_batch_size": self.setup.max_batch_size,
            "batch_wait_timeout_s": self.setup.batch_wait_timeout_s,
            "threads": torch.get_num_threads(),
            "pid": os.getpid(),
            **attrs.asdict(self.counts),
        }


def application(setup: ReplicaSetup, replicas: int) -> Any:
    """The Serve application of ``replicas`` replicas, each asking Ray for what ``setup`` needs."""
    deployment = serve.deployment(
        name=DEPLOYMENT_NAME,
        num_replicas=replicas,
        ray_actor_options=setup.actor_options(),
        max_ongoing_requests=setup.max_ongoing_requests(),
    )(CheckpointReplica)
    return deployment.bind(setup)
