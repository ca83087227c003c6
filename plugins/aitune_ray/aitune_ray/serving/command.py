"""``aitune serve CKPT --factory pkg.mod:build``: the application on this machine until Ctrl-C.

The core's command line parses the options and calls :func:`serve_command`; this
distribution does the serving. It prints what the checkpoint was tuned for and the URL,
serves until Ctrl-C (or SIGTERM), then shuts Serve and its Ray down and returns 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, TextIO

from aitune_core.plugin_api import CheckpointError
from aitune_ray.serving.factory import FactoryError
from aitune_ray.serving.launch import ServeError, keep_ray_local, serve_locally
from aitune_ray.serving.settings import ServeSettings

INSTALL = "pip install 'aitune-ray[serve]'"


def missing_serve() -> str | None:
    """Why Ray Serve cannot be imported here (its HTTP libraries come with the ``serve`` extra), or None."""
    try:
        import starlette  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as error:
        return str(error)
    return None


def serve_command(
    *,
    checkpoint: str,
    factory: str,
    port: int,
    replicas: int = 1,
    max_wait_ms: float | None = None,
    max_batch: int | None = None,
    threads: int | None = None,
    eager: bool = False,
    trust_native_code: bool = False,
    out: TextIO | None = None,
) -> int:
    """Serve until stopped; 0 after a clean stop, 1 with one line saying why when it cannot start."""
    out = out or sys.stdout
    keep_ray_local()  # before the first import of ray, below
    missing = missing_serve()
    if missing is not None:
        print(f"aitune serve: Ray Serve is not installed here ({missing}): {INSTALL}", file=sys.stderr)
        return 1
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the factory's module may sit in the current folder, as for python -m
    options: dict[str, Any] = {"max_wait_ms": max_wait_ms} if max_wait_ms is not None else {}
    try:
        settings = ServeSettings(
            checkpoint,
            factory,
            replicas=replicas,
            max_batch=max_batch,
            threads=threads,
            eager=eager,
            trust_native_code=trust_native_code,
            **options,
        )
        with serve_locally(settings, port) as server:
            setup = server.setup
            print(server.plan.describe(), file=out)
            print(
                f"{settings.replicas} replica(s), each {setup.num_cpus:g} CPU(s)"
                f"{', 1 GPU' if setup.num_gpus else ''}, batches of up to {setup.max_batch_size} rows waiting at most "
                f"{setup.batch_wait_timeout_s * 1000:g} ms, serving {'eager' if eager else 'the tuned routes'}",
                file=out,
            )
            print(f'Serving at {server.url}  (POST {{"inputs": [...]}}; GET for stats; Ctrl-C to stop)', file=out)
            out.flush()
            wait_for_stop()
            print("Stopping...", file=out, flush=True)
    except (ServeError, FactoryError, CheckpointError, ValueError) as error:
        print(f"aitune serve: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    print("Stopped.", file=out, flush=True)
    return 0


def wait_for_stop() -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM.

    Both get a handler of their own: a process started in the background by a shell
    inherits SIGINT ignored, and Python then raises no KeyboardInterrupt for it.
    """
    stop = threading.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda *_: stop.set()) for number in signals}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
