"""What a served application is made of: the user's choices and what the checkpoint's tuning says.

:class:`ServeSettings` holds what the user chose (``aitune serve``'s options);
:func:`replica_setup` turns them and the checkpoint's :class:`~aitune_core.ServingPlan`
into what each replica runs with: the batch size requests are stacked up to (the
largest batch tuning built and validated for), how long a batch waits to fill, the
threads torch runs at and the CPUs and GPU a replica asks Ray for. Plain data, so that
Ray hands it to every replica as it is.
"""

from __future__ import annotations

import attrs

from aitune_core import ServingPlan

DEFAULT_MAX_WAIT_MS = 5.0
"""How long a batch waits for more requests once its first one came: small next to a model call."""
DEFAULT_PORT = 8000
LOOPBACK = "127.0.0.1"


def _positive(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen
class ServeSettings:
    """What the user chose.

    checkpoint: the checkpoint folder or archive (``ait.save``).
    factory: ``pkg.mod:build``, a function that builds the tuned model with no arguments.
    replicas: how many replicas serve it.
    max_wait_ms: how long a batch waits to fill once its first request came.
    max_batch: the most rows stacked into one call; None: the largest batch tuning built for.
    threads: torch threads per replica (and the CPUs it asks for); None: those it was tuned at.
    eager: serve the model's own forward with the checkpoint's weights, not the tuned routes
        (the same application, for comparing).
    trust_native_code: load checkpoints holding machine code (``ait.load(..., trust_native_code=True)``).
    """

    checkpoint: str
    factory: str
    replicas: int = attrs.field(default=1, validator=_positive)
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    max_batch: int | None = attrs.field(default=None, validator=_positive)
    threads: int | None = attrs.field(default=None, validator=_positive)
    eager: bool = False
    trust_native_code: bool = False

    def __attrs_post_init__(self) -> None:
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be at least 0, got {self.max_wait_ms}")


@attrs.frozen
class ReplicaSetup:
    """What every replica runs with (see the module docstring)."""

    checkpoint: str
    factory: str
    max_batch_size: int
    batch_wait_timeout_s: float
    threads: int | None
    num_cpus: float
    num_gpus: float
    device_map: str | None
    eager: bool
    trust_native_code: bool

    def actor_options(self) -> dict[str, float]:
        """Ray's ``ray_actor_options`` for a replica: the CPUs its threads use, a GPU when a graph runs on CUDA."""
        options = {"num_cpus": self.num_cpus}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        return options

    def max_ongoing_requests(self) -> int:
        """Requests a replica takes at once: a batch being run and a full one forming (one row each, at most)."""
        return max(2 * self.max_batch_size, 2)


def replica_setup(settings: ServeSettings, plan: ServingPlan) -> ReplicaSetup:
    """What each replica of ``settings`` runs with, sized from ``plan``; ValueError where the two disagree."""
    if plan.native_code and not settings.trust_native_code:
        raise ValueError(
            f"{settings.checkpoint} holds native code (an AOT package or engine) that loading runs; serve it with "
            "--trust-native-code if you trust where it came from"
        )
    tuned = plan.max_batch or 1
    threads = settings.threads or plan.threads
    devices = plan.devices
    return ReplicaSetup(
        checkpoint=settings.checkpoint,
        factory=settings.factory,
        max_batch_size=settings.max_batch or tuned,
        batch_wait_timeout_s=settings.max_wait_ms / 1000.0,
        threads=threads,
        num_cpus=float(threads or 1),
        num_gpus=1.0 if plan.needs_gpu else 0.0,
        device_map="cuda" if devices == ("cuda",) else None,
        eager=settings.eager,
        trust_native_code=settings.trust_native_code,
    )
