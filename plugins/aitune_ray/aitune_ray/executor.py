"""RayExecutor: every candidate a Ray task, scheduled where its device is free.

What travels, and how often:

* per graph, once: the module, its recorded samples and the graph spec, as one
  :class:`~aitune_core.plugin_api.executors.GraphPayload` put in Ray's object store
  (``ray.put``); every task of the graph gets a reference, so a node fetches it once
  however many candidates it runs;
* per candidate: the backend's registered name and config (plain data), and back where
  it runs (worker and node), its summary row as JSON and, for an ahead-of-time backend
  that passed, its artifacts as bytes through the object store. The driver fetches
  those as soon as the candidate passes and writes them into build folders of its own
  (it restores every passed candidate to time it anyway), so a node that leaves the
  cluster later takes nothing the tuning still needs. Those folders are named after the
  driver's pid (:func:`aitune_ray.artifacts.unpack_artifacts`): the cache counts them
  against its cap and removes them as it does the driver's own builds.

Workers share no disk with the driver: each builds in its node's temporary folder and
keeps builds in its node's own artifact store (:mod:`aitune_ray.nodes`).

Each task asks for what its device needs: one GPU (``num_gpus``) for CUDA graphs,
``num_cpus`` CPUs otherwise, plus any custom ``resources`` and, with ``memory_mb``, that
much memory (Ray's ``memory`` resource), so that Ray places no more candidates on a
node than its memory holds. Ray only books that memory; the task itself holds its
candidate to it (:class:`~aitune_ray.memory_watch.MemoryWatch`: the worker and
the helpers it started, read from ``/proc``), failing the candidate with "out of
memory" when it goes over, and ending the worker if the candidate is stuck in native
code ten seconds later. Without ``memory_mb`` a candidate may hold half of its node's
memory, so that one runaway candidate cannot take a node down. A task first reports which
worker took it; its time limit starts then, so time spent waiting for room in the
cluster does not count. Ray does not retry a task (``max_retries=0``): a worker that
dies or is killed at the time limit makes that candidate a failed row naming the
worker, and a node that leaves the cluster (removed, preempted, its raylet dead) makes
each candidate running there a failed row naming the node, ``node lost: node <id> at
<address> ...``; the other candidates and the tuning go on.

The driver connects to ``address``, else to ``RAY_ADDRESS``, else starts a Ray on this
machine (and stops it when the tuning run ends), whose workers share this process's
cache folder. A Ray the caller started with ``ray.init`` is used as it is and left running.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from aitune_core.plugin_api import config, get_logger
from aitune_core.plugin_api.executors import (
    DEFAULT_TIMEOUT_S,
    EXIT_OUT_OF_MEMORY,
    Answer,
    ExecutorError,
    RemoteExecutor,
    builds_root,
    default_limit_mb,
)
from aitune_ray.artifacts import unpack_artifacts
from aitune_ray.memory_watch import CandidateMemoryError, MemoryWatch
from aitune_ray.nodes import Place
from aitune_ray.worker import has_artifacts

if TYPE_CHECKING:
    import torch

    from aitune_core.plugin_api.executors import CandidateResult, GraphPayload, GraphSession

UNSTARTED = "ray (not started)"
"""The worker column of a candidate that no worker took (the cluster never had room for it)."""


@attrs.define(eq=False)
class _Graph:
    """A graph in the object store, its candidates' task options, where artifacts go here, and the tasks running."""

    payload: Any
    options: dict[str, Any]
    cache_dir: Path
    running: set[Any] = attrs.field(factory=set)
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class RayExecutor(RemoteExecutor):
    """Runs each candidate as a Ray task, on a cluster or on a Ray started here.

    workers: candidates running at once; None: as many as the cluster has room for at
        the time of the graph (GPUs for CUDA graphs, ``CPU / num_cpus`` otherwise). Set it
        on an autoscaling cluster, whose room grows only once tasks wait.
    timeout_s: the most one candidate may take once a worker has taken it; it may also
        wait at most this long for a worker (a task asking for a GPU the cluster lacks
        would otherwise wait forever). "auto": ``DEFAULT_TIMEOUT_S`` (600 s).
    address: the cluster to connect to; None: ``RAY_ADDRESS``, else a local Ray.
    num_cpus: CPUs each candidate asks for (its torch threads, too).
    num_gpus: GPUs each candidate of a CUDA graph asks for.
    resources: custom Ray resources every candidate asks for, e.g. ``{"a100": 1}``.
    memory_mb: host memory each candidate asks Ray for, and may hold with the helpers
        its worker starts; None: no booking, and at most half of its node's memory.
    runtime_env: the Ray runtime environment (``pip``, ``py_modules``, ``env_vars``...)
        for a Ray this executor connects to or starts; a local Ray gets this process's
        ``sys.path`` and cache folder by default, so its workers import what the driver
        imports and keep builds in the driver's store.
    fresh_workers: run every candidate in a new worker process (Ray's ``max_calls=1``),
        so no compiler state carries over from one candidate to the next; costs a
        worker start-up per candidate. GPU tasks get fresh workers in any case.
    local_cpus: CPUs of a Ray started here; None lets Ray count them.
    """

    name = "ray"

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float | Literal["auto"] | None = "auto",
        address: str | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 1.0,
        resources: dict[str, float] | None = None,
        runtime_env: dict[str, Any] | None = None,
        fresh_workers: bool = False,
        local_cpus: int | None = None,
        memory_mb: int | None = None,
    ) -> None:
        super().__init__(workers, DEFAULT_TIMEOUT_S if timeout_s == "auto" else timeout_s)
        if num_cpus <= 0 or num_gpus <= 0:
            raise ValueError(f"num_cpus and num_gpus must be positive, got {num_cpus} and {num_gpus}")
        if memory_mb is not None and (isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb <= 0):
            raise ValueError(f"memory_mb must be a positive whole number of MiB or None, got {memory_mb!r}")
        self.memory_mb = memory_mb
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.resources = dict(resources or {})
        self.runtime_env = runtime_env
        self.fresh_workers = fresh_workers
        self.local_cpus = local_cpus
        self._started_ray = False
        self._task: Any = None
        self._connect_lock = threading.Lock()

    # ------------------------------------------------------------------ connection
    def _ray(self) -> Any:
        """The ``ray`` module, connected: to the caller's Ray, ``address``, ``RAY_ADDRESS`` or a new local one."""
        try:
            import ray
        except ImportError as error:  # a dependency of aitune-ray, so only a broken environment gets here
            raise ExecutorError(f"the ray executor needs Ray: {error}; pip install aitune-ray") from error
        with self._connect_lock:
            if ray.is_initialized():
                return ray
            address = self.address or os.environ.get("RAY_ADDRESS")
            log = get_logger()
            if address:
                ray.init(address=address, runtime_env=self.runtime_env)
            else:
                paths = os.pathsep.join(dict.fromkeys(entry or os.getcwd() for entry in sys.path))
                runtime_env = self.runtime_env or {"env_vars": {"PYTHONPATH": paths, **_this_cache()}}
                ray.init(
                    num_cpus=self.local_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    runtime_env=runtime_env,
                    **local_temp_dir(),
                )
                self._started_ray = True
            resources = ray.cluster_resources()
            log.info(
                "ray connected",
                address=address or "local",
                nodes=len(ray.nodes()),
                cpus=resources.get("CPU", 0),
                gpus=resources.get("GPU", 0),
            )
            return ray

    def max_parallel(self, session: GraphSession) -> int:
        if self.workers is not None:
            return self.workers
        resources = self._ray().cluster_resources()
        if session.device.type == "cuda":
            return max(1, int(resources.get("GPU", 0) // self.num_gpus))
        return max(1, int(resources.get("CPU", 1) // self.num_cpus))

    def describe(self) -> str:
        where = self.address or os.environ.get("RAY_ADDRESS") or "local"
        return super().describe().replace("ray (", f"ray ({where}, ", 1)

    def _remote_task(self) -> Any:
        if self._task is None:
            self._task = self._ray().remote(max_retries=0)(run_limited_task)
        return self._task

    def task_options(self, device: torch.device) -> dict[str, Any]:
        """Ray options of one candidate's task on ``device``."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus}
        if device.type == "cuda":
            options["num_gpus"] = self.num_gpus
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.memory_mb is not None:
            options["memory"] = self.memory_mb * 2**20
        if self.fresh_workers:
            options["max_calls"] = 1
        return options

    def ship(self, session: GraphSession, payload: GraphPayload) -> _Graph:
        return _Graph(self._ray().put(payload), self.task_options(session.device), session.cache_dir)

    def cache_dir_for(self, session: GraphSession) -> str | None:
        return None  # workers build in folders of their own: the driver's disk may be elsewhere

    def candidate_options(self) -> dict[str, Any]:
        return {"threads": max(1, int(self.num_cpus)), MEMORY_KEY: self.memory_mb}

    def run(self, handle: Any, candidate: dict[str, Any]) -> Answer:
        graph: _Graph = handle
        ray = self._ray()
        stream = self._remote_task().options(**graph.options).remote(graph.payload, candidate)
        with graph.lock:
            graph.running.add(stream)
        place = Place(UNSTARTED)
        try:
            if not ray.wait([stream], timeout=self.timeout_s)[0]:
                ray.cancel(stream, force=True)
                reason = f"no worker took it within {self.timeout_s:g} s (it asks for {graph.options})"
                return Answer.failed("start", reason, place.worker)
            place = Place.from_data(ray.get(next(stream)))
            if not ray.wait([stream], timeout=self.timeout_s)[0]:
                ray.cancel(stream, force=True)
                return Answer.failed("run", f"timed out after {self.timeout_s:g} s", place.worker)
            answer = Answer.from_json(ray.get(next(stream)))
            if has_artifacts(answer.result):  # here before the node can go; written by this process, not the worker
                packed = ray.get(next(stream), timeout=self.timeout_s)
                answer.fetch = unpack_artifacts(packed, builds_root(graph.cache_dir))
            return answer
        except ray.exceptions.TaskCancelledError:
            return Answer.failed("run", "stopped: the strategy finished without it", place.worker)
        except (ray.exceptions.RayError, StopIteration) as error:
            return Answer.failed("run", _failure_reason(ray, error, place), place.worker, str(error))
        finally:
            with graph.lock:
                graph.running.discard(stream)

    def fetch_artifacts(self, session: GraphSession, result: CandidateResult, fetch: Any) -> dict[str, str]:
        return dict(fetch or {})  # written into build folders of this process when the candidate passed (:meth:`run`)

    def cancel(self, handle: Any) -> None:
        graph: _Graph = handle
        ray = self._ray()
        with graph.lock:
            for ref in graph.running:
                ray.cancel(ref, force=True)

    def unship(self, handle: Any) -> None:
        graph: _Graph = handle
        graph.payload = None  # the last reference: Ray frees the object

    def close(self) -> None:
        super().close()
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False


def _this_cache() -> dict[str, str]:
    """What gives a local Ray's workers this process's cache folder and store cap: one machine, one store."""
    return {
        "AITUNE_CACHE_DIR": str(config.cache_dir.expanduser().absolute()),
        "AITUNE_STORE_MAX_MB": str(config.store_max_mb),
    }


def local_temp_dir() -> dict[str, Any]:
    """``ray.init`` options for a Ray started here: a temp folder outside the virtualenv when needed.

    Ray's workers refuse to start with a temp folder inside the virtualenv, which is where
    nox (and some CI setups) point ``TMPDIR``.
    """
    temp = Path(tempfile.gettempdir()).resolve()
    if not temp.is_relative_to(Path(sys.prefix).resolve()):
        return {}
    return {"_temp_dir": str(Path("/tmp") / f"ray-aitune-{os.getuid()}")}


MEMORY_KEY = "held_memory_limit_mb"
"""The candidate payload's key for the memory limit :func:`run_limited_task` holds it to."""


def run_limited_task(payload: GraphPayload, candidate: dict[str, Any]) -> Iterator[Any]:
    """The Ray task: :func:`aitune_ray.worker.run_candidate_task`, holding the candidate to its memory limit.

    The limit is armed only while the task's own code runs, never while Ray holds the
    generator between two answers, so that the exception cannot land in Ray's code.
    """
    from aitune_ray.worker import run_candidate_task

    limit_mb = candidate.get(MEMORY_KEY) or default_limit_mb()
    task = run_candidate_task(payload, candidate)
    if not limit_mb:
        yield from task
        return
    with MemoryWatch(limit_mb * 2**20, EXIT_OUT_OF_MEMORY) as watch:
        while True:
            with watch.armed():
                try:
                    answer = next(task)
                except StopIteration:
                    return
            yield answer


def _failure_reason(ray: Any, error: BaseException, place: Place) -> str:
    """Why a task ended without its answer: out of memory, its node gone, or its worker dead."""
    if _out_of_memory(ray, error):
        return f"out of memory: {_first_line(error)}"
    node_died = getattr(ray.exceptions, "NodeDiedError", ())
    if isinstance(error, node_died) or (place.node_id and not _node_alive(ray, place.node_id)):
        if not place.node_id:  # it went before the worker said where it runs: Ray's message names it
            return f"node lost: {_first_line(error)}"
        return f"node lost: {place.describe()} left the cluster while the candidate ran ({type(error).__name__})"
    return f"worker died: {_first_line(error)}"


def _node_alive(ray: Any, node_id: str) -> bool:
    """Whether the cluster still counts ``node_id`` among its live nodes (True when it cannot tell)."""
    try:
        return any(node.get("NodeID") == node_id and node.get("Alive") for node in ray.nodes())
    except Exception:  # the cluster itself is unreachable: the worker's error says more
        return True


def _out_of_memory(ray: Any, error: BaseException) -> bool:
    """A task stopped by Ray's memory monitor, or by its own limit (:func:`run_limited_task`)."""
    monitor = getattr(ray.exceptions, "OutOfMemoryError", None)
    return (monitor is not None and isinstance(error, monitor)) or CandidateMemoryError.__name__ in str(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
