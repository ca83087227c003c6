"""Serving a checkpoint on this machine: a Ray of its own, on loopback, with the application on it.

:func:`serve_locally` reads what the checkpoint needs (``ait.serving_plan``), checks the
factory can be found, starts a new Ray here (never one at ``RAY_ADDRESS`` or another
host) whose processes listen on 127.0.0.1 only, starts Serve's HTTP proxy on
127.0.0.1, runs the application and waits until every replica has loaded the
checkpoint. On leaving, Serve and that Ray are shut down, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

import aitune_core as ait
from aitune_core.plugin_api import get_logger
from aitune_ray.executor import local_temp_dir
from aitune_ray.serving.factory import resolve_factory
from aitune_ray.serving.settings import DEFAULT_PORT, LOOPBACK, ReplicaSetup, ServeSettings, replica_setup

APP_NAME = "aitune"
LOCAL_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""Ray's local-only mode (read when ``ray`` is first imported): its processes take 127.0.0.1 as this
machine's address; and no usage report leaves the machine."""


class ServeError(RuntimeError):
    """The application cannot be started as asked; the message says why and the fix."""


@attrs.define
class LocalServer:
    """A running application: its ``url``, what each replica runs with, and a handle for calling it from Python."""

    url: str
    setup: ReplicaSetup
    plan: ait.ServingPlan
    handle: Any

    def stats(self) -> dict[str, Any]:
        """One replica's set-up and counts (see ``CheckpointReplica.stats``)."""
        result: dict[str, Any] = self.handle.stats.remote().result()
        return result


def keep_ray_local() -> None:
    """Put Ray in its local-only mode; to take effect, this must come before anything imports ``ray``."""
    os.environ.update(LOCAL_ONLY)


def start_local_ray(num_cpus: int | None = None) -> Any:
    """A new Ray on this machine, listening on 127.0.0.1 only; its workers import from this ``sys.path``."""
    keep_ray_local()
    import ray

    if ray.is_initialized():
        raise ServeError("Ray is already started in this process; aitune serve starts a Ray of its own")
    address = ray.util.get_node_ip_address()
    if address != LOOPBACK:
        raise ServeError(
            f"Ray would listen on {address}, not {LOOPBACK}: ray was imported before "
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set; start the server in a fresh process"
        )
    entries = [entry or os.getcwd() for entry in sys.path]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries)), **LOCAL_ONLY}
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
        **local_temp_dir(),
    )
    return ray


@contextlib.contextmanager
def serve_locally(
    settings: ServeSettings,
    port: int = DEFAULT_PORT,
    *,
    num_cpus: int | None = None,
) -> Iterator[LocalServer]:
    """Run the application of ``settings`` at ``http://127.0.0.1:port/`` for the duration of the block.

    num_cpus: the CPUs the local Ray offers (None: this machine's); replicas ask for their share.
    The replicas import from this process's ``sys.path``, where the factory's module must be found.
    Raises ServeError, FactoryError or CheckpointError naming the fix; nothing is left running.
    """
    with serve_applications({APP_NAME: settings}, port, num_cpus=num_cpus) as servers:
        yield servers[APP_NAME]


@contextlib.contextmanager
def serve_applications(
    applications: Mapping[str, ServeSettings],
    port: int = DEFAULT_PORT,
    *,
    num_cpus: int | None = None,
) -> Iterator[dict[str, LocalServer]]:
    """As :func:`serve_locally`, for several applications on one Ray: each at ``/NAME/`` (a single one at ``/``).

    Comparing two applications this way (the tuned and the eager, say) times both with the
    same Ray, proxy and client, one loaded at a time.
    """
    prepared = {name: _prepared(settings) for name, settings in applications.items()}
    for settings, _, _ in prepared.values():
        resolve_factory(settings.factory)  # a typo fails here, before Ray starts
    _check_port(port)
    ray = start_local_ray(num_cpus)
    serving = False
    try:
        from ray import serve

        from aitune_ray.serving.app import application

        _check_room(ray, [(setup, settings.replicas) for settings, _, setup in prepared.values()])
        serving = True
        try:
            serve.start(http_options={"host": LOOPBACK, "port": port}, proxy_location="HeadOnly")
        except RuntimeError as error:  # the proxy's own error, as Ray raises it from the actor
            last = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            raise ServeError(
                f"Serve's HTTP proxy did not start on {LOOPBACK}:{port} ({last}); try another --port"
            ) from None
        servers = {}
        for name, (settings, plan, setup) in prepared.items():
            prefix = "/" if len(prepared) == 1 else f"/{name}"
            try:
                handle = serve.run(application(setup, settings.replicas), name=name, route_prefix=prefix)
            except RuntimeError as error:
                raise ServeError(f"the application did not start: {error} {_why_not(serve, name)}") from None
            url = f"http://{LOOPBACK}:{port}{prefix.rstrip('/')}/"
            get_logger().info("serving", url=url, checkpoint=settings.checkpoint, replicas=settings.replicas)
            servers[name] = LocalServer(url, setup, plan, handle)
        yield servers
    finally:
        if serving:
            with contextlib.suppress(Exception):
                from ray import serve

                serve.shutdown()
        ray.shutdown()


def _check_port(port: int) -> None:
    """Refuse a port another process listens on now, before Ray starts (Serve's proxy would fail to bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError as error:
            raise ServeError(f"cannot serve on {LOOPBACK}:{port}: {error.strerror}; choose another --port") from None


def _why_not(serve: Any, name: str) -> str:
    """The last line of what Serve says about each deployment of application ``name``: a replica's error, say."""
    try:
        overview = serve.status().applications[name]
    except Exception:  # the status itself is out of reach: the error raised says what it can
        return ""
    lines = [status.message.strip().splitlines()[-1] for status in overview.deployments.values() if status.message]
    return f"(a replica's error: {'; '.join(lines)[:2000]})" if lines else ""


def _prepared(settings: ServeSettings) -> tuple[ServeSettings, ait.ServingPlan, ReplicaSetup]:
    """The settings with the checkpoint's absolute path (replicas run elsewhere), its plan and the replicas' setup."""
    settings = attrs.evolve(settings, checkpoint=str(Path(settings.checkpoint).expanduser().resolve()))
    plan = ait.serving_plan(settings.checkpoint)
    try:
        return settings, plan, replica_setup(settings, plan)
    except ValueError as error:
        raise ServeError(str(error)) from None


def _check_room(ray: Any, needs: Sequence[tuple[ReplicaSetup, int]]) -> None:
    """Replicas that cannot all be placed would leave an application starting forever: say so now."""
    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    replicas = sum(count for _, count in needs)
    wanted_cpus = sum(setup.num_cpus * count for setup, count in needs)
    wanted_gpus = sum(setup.num_gpus * count for setup, count in needs)
    if wanted_cpus > cpus:
        raise ServeError(
            f"{replicas} replica(s) need {wanted_cpus:g} CPUs (their tuned threads), and this machine's Ray has "
            f"{cpus:g}: ask for fewer --replicas or --threads"
        )
    if wanted_gpus > gpus:
        raise ServeError(
            f"the checkpoint was tuned on CUDA: {replicas} replica(s) need a GPU each, and this machine's Ray has "
            f"{gpus:g}; ask for fewer --replicas"
        )
