"""A wrapped module's two recordings: the tuning data, and the calls it recorded on its own.

``tune`` must tune from the calls its own run made, never from the traffic the module
served before it began: a server's threads calling with batch 3,000 before a
``tune(batch_sizes=[1, 2, 4, 8])`` would otherwise widen the tuned range to 3,000 and have
the tuned backend serve batches it was never measured at. So the calls made inside a
recording session (``tune`` gathers in one) and the calls a RECORDING module records
outside any session (a fresh wrapper called directly, the JIT's live calls) go to two
recorders, and ``tune`` reads the first only.

Keeping the second, rather than no longer recording calls outside sessions, leaves
everything that reads a fresh wrapper's graphs working as before: a wrapped module still
records on its own when called, the JIT still tunes the live calls it recorded
(``tune_module`` on :attr:`~aitune_core.module.wrapper.Module.graphs`), and backends'
tests still record by calling. The sessions' recorder keeps what every run gathered (a
re-tune widens the ranges of the runs before it) and the graphs checkpoints bring.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.recorder import GraphRecorder
from aitune_core.module.session import current_session


class Recordings:
    """The sessions' recorder (``tuning``) and the recorder of calls made outside any session."""

    __slots__ = ("tuning", "unsessioned")

    def __init__(
        self, module_name: str, signature: ForwardSignature, key_parts: Callable[[dict[str, Any]], Hashable] | None
    ) -> None:
        self.tuning = GraphRecorder(module_name, signature, key_parts)
        self.unsessioned = GraphRecorder(module_name, signature, key_parts)

    @property
    def shown(self) -> GraphRecorder:
        """The tuning data once a session recorded or a checkpoint brought any; until then the calls recorded apart.

        Those are what a fresh wrapper shows when called directly, and what the JIT tunes.
        """
        tuning = self.tuning
        return tuning if tuning.calls or tuning.graphs or not self.unsessioned.graphs else self.unsessioned

    def unrouted(self, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], own: bool) -> Any:
        """Run a call that no route serves: a session's is tuning data; ``own``: the module records it apart."""
        if current_session() is not None:
            return self.tuning.record(forward, args, kwargs)
        if own:
            return self.unsessioned.record(forward, args, kwargs)
        return forward(*args, **kwargs)
