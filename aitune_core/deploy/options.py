"""A target's options from the command line: ``--option instances=2`` read by the field types of its options class.

Targets declare their options as an attrs class, so that ``ait.export(..., options={...})``
takes typed values and the command line's ``KEY=VALUE`` text is converted by the same
declaration: whole numbers, numbers, yes/no and text. A key the target does not have,
or a value its type cannot read, is refused naming the options it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def options_from_text(options_class: type, pairs: Sequence[str]) -> dict[str, Any]:
    """``{field: value}`` from ``["KEY=VALUE", ...]``, each value read as its field's type says."""
    fields = {field.name: field for field in attrs.fields(attrs.resolve_types(options_class))}
    known = ", ".join(sorted(fields)) or "none"
    result: dict[str, Any] = {}
    for pair in pairs:
        key, separator, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not separator or key not in fields:
            raise ValueError(f"option {pair!r} is not KEY=VALUE with a KEY of this target (its options: {known})")
        result[key] = _read(key, text.strip(), fields[key].type)
    return result


def _read(key: str, text: str, kind: Any) -> Any:
    names = getattr(kind, "__name__", str(kind))
    optional = "None" in names
    if optional and text.lower() in ("", "none"):
        return None
    try:
        if "bool" in names:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)
        if "int" in names:
            return int(text)
        if "float" in names:
            return float(text)
    except ValueError:
        raise ValueError(f"option {key}={text!r}: not a value of type {names}") from None
    return text
