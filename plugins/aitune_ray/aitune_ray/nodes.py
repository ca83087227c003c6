"""The node a candidate runs on: who it is, and what of its own it builds with.

Nodes of a cluster share no disk with the driver, nor with each other. So a worker
never writes where the driver said its cache is: it builds in its node's temporary
folder (:mod:`aitune_ray.worker`), and keeps builds for later tunes in the artifact
store of its node's own cache folder (``AITUNE_CACHE_DIR`` there, else that node's
default), when the driver's store is on and the node's is too. What the driver
needs of a build comes back through Ray (:mod:`aitune_ray.artifacts`).

A task first tells the driver where it runs (:class:`Place`): the worker, as the
summary's *Worker* column shows it, and its node's id and address, which name the
node in the failed row of a candidate whose node left the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from aitune_core.plugin_api.executors import ArtifactStore, worker_id

if TYPE_CHECKING:
    from aitune_core.plugin_api.executors import GraphPayload


@attrs.frozen
class Place:
    """Where a candidate runs: ``worker`` (``pid@host``), its Ray node's id and that node's address."""

    worker: str
    node_id: str = ""
    address: str = ""

    @classmethod
    def here(cls) -> Place:
        """This worker's place; called inside a Ray task."""
        import ray

        return cls(worker_id(), ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())

    def describe(self) -> str:
        """``node <id> at <address>``: how Ray's own logs and ``ray list nodes`` name the node."""
        return f"node {self.node_id or '(unknown)'} at {self.address or '(unknown address)'}"

    def to_data(self) -> dict[str, str]:
        return attrs.asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Place:
        return cls(**data)


def on_this_node(payload: GraphPayload) -> GraphPayload:
    """``payload`` with this node's own artifact store in place of the driver's folder (none where either is off)."""
    if payload.spec.get("store") is None:
        return payload
    own = ArtifactStore.from_config()  # this worker's config: its node's AITUNE_CACHE_DIR and AITUNE_STORE
    return attrs.evolve(payload, spec={**payload.spec, "store": None if own is None else own.to_data()})
