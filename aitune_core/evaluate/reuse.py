"""A candidate's build from the artifact store, and a passed build kept there.

:func:`stored_build` is what a candidate tries before building: the backend of the
same key (see :mod:`aitune_core.store.key`), restored from its hash-checked artifacts
into the candidate's own build folder and activated. The candidate then goes on as a
built one would: validated against eager, profiled, and saved from its seal. Its row
says ``reused``. :func:`keep_build` stores a candidate that was built here and passed
validation, so that the next tune finds it.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from aitune_core.backends.artifacts import seal_of
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.evaluate.result import CandidateResult
from aitune_core.evaluate.session import GraphSession
from aitune_core.guard import ModuleChangedError
from aitune_core.store import searches
from aitune_core.store.key import NotStorableError, key_parts, key_parts_of_graph, store_key

_keys: weakref.WeakKeyDictionary[Backend, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
"""The store key of each candidate looked up, so that keeping its build does not hash again."""


def _key(session: GraphSession, backend: Backend) -> tuple[str, dict[str, Any]] | None:
    known = _keys.get(backend)
    if known is not None:
        return known
    try:
        parts = key_parts(session.module, session.guard, session.graph, backend, session.device)
        key = store_key(parts)
    except NotStorableError:  # a class defined in code, not by a plugin: built every time, as before
        return None
    except Exception as error:  # a config the store cannot key (not JSON data): build, never store
        session.log.info("build not keyed for the store", backend=backend.describe(), reason=str(error))
        return None
    _keys[backend] = (key, parts)
    return key, parts


def stored_build(
    session: GraphSession, backend: Backend, context: BuildContext, result: CandidateResult
) -> Backend | None:
    """The stored build of ``backend`` (an unbuilt copy), ACTIVE, when the store has it; else None."""
    store = session.store
    keyed = _key(session, backend) if store is not None else None
    if store is None or keyed is None:
        return None
    start = time.perf_counter()
    found = store.load(keyed[0], context.cache_dir, session.log)
    if found is None:
        return None
    restored, record = found
    _keys[restored] = keyed
    try:
        with session.guard.step("build"):
            restored.activate(context)
    except ModuleChangedError:
        raise
    except Exception as error:
        store.refuse(keyed[0], f"it does not activate here: {type(error).__name__}: {error}", session.log)
        return None
    result.reused = True
    result.build_s = time.perf_counter() - start
    session.log.info(
        "build reused",
        backend=result.backend,
        entry=keyed[0][:16],
        stored_for=f"{record.module}/{record.graph}",
        duration_s=round(result.build_s, 3),
    )
    return restored


def refuse_stored_build(session: GraphSession, backend: Backend, reason: str) -> None:
    """Remove the entry ``backend`` was restored from, so that the build made instead can be kept."""
    keyed = _keys.get(backend)
    if session.store is not None and keyed is not None:
        session.store.refuse(keyed[0], reason, session.log)


def keep_build(session: GraphSession, backend: Backend, result: CandidateResult) -> None:
    """Store ``backend``, built here and validated, for the next tune; a failure to store is only logged."""
    store = session.store
    validated = seal_of(backend)
    if store is None or result.reused or validated is None:
        return
    keyed = _key(session, backend)
    if keyed is not None:
        store.put(keyed[0], keyed[1], backend, validated, (session.module_name, session.graph.name), session.log)


def _search_parts(session: GraphSession, settings: dict[str, Any]) -> dict[str, Any] | None:
    try:
        parts = key_parts_of_graph(session.module, session.guard, session.graph, session.device)
    except Exception:
        return None
    return {**parts, "search": settings}


def recalled_max_batch(session: GraphSession, settings: dict[str, Any]) -> int | None:
    """The max batch size an earlier search on this graph and weights found (:mod:`aitune_core.store.searches`)."""
    parts = _search_parts(session, settings) if session.store is not None else None
    return None if parts is None or session.store is None else searches.recalled(session.store, parts)


def remember_max_batch(session: GraphSession, settings: dict[str, Any], max_batch_size: int) -> None:
    parts = _search_parts(session, settings) if session.store is not None else None
    if parts is not None and session.store is not None:
        searches.remember(session.store, parts, max_batch_size)
