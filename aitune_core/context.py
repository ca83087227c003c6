"""The global tuning context: values that every wrapped module can see during a call.

``tune`` sets the batch size here before running the user's function, so that modules
deep inside it can relate their tensor shapes to the batch size without being told.
A ContextVar keeps threads and async tasks apart.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

BATCH_SIZE_KEY = "batch_size"

_values: ContextVar[dict[str, Any] | None] = ContextVar("aitune_context", default=None)


class GlobalContext:
    """``with global_context: global_context.set(BATCH_SIZE_KEY, 4)`` scopes values to the block."""

    def __init__(self) -> None:
        self._tokens: ContextVar[list[Token[dict[str, Any] | None]] | None] = ContextVar(
            "aitune_context_tokens", default=None
        )

    def __enter__(self) -> GlobalContext:
        stack = self._tokens.get() or []
        stack = [*stack, _values.set(dict(_values.get() or {}))]
        self._tokens.set(stack)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = self._tokens.get() or []
        if stack:
            _values.reset(stack[-1])
            self._tokens.set(stack[:-1])

    def set(self, key: str, value: Any) -> None:
        current = dict(_values.get() or {})
        current[key] = value
        _values.set(current)

    def get(self, key: str, default: Any = None) -> Any:
        return (_values.get() or {}).get(key, default)


global_context = GlobalContext()


def current_batch_size() -> int | None:
    return global_context.get(BATCH_SIZE_KEY)
