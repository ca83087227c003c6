"""Protocol buffer text format, written from plain data: how a ``config.pbtxt`` is put on disk.

Triton reads a model's configuration as the text form of its ``ModelConfig`` message.
The configuration is built here as plain Python (a dict per message, a list per
repeated field, :class:`Enum` for enum values) and written by :func:`render`, so the
target needs no protobuf library; the tests parse every file written with protobuf's
own parser into Triton's ``ModelConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Enum(str):
    """An enum value (``TYPE_FP32``), written bare instead of quoted."""


def render(message: Mapping[str, Any]) -> str:
    """The text format of ``message``: one field per line, nested messages indented."""
    return "\n".join(_fields(message, 0)) + "\n"


def _fields(message: Mapping[str, Any], depth: int) -> list[str]:
    pad = "  " * depth
    lines: list[str] = []
    for key, value in message.items():
        if isinstance(value, Mapping):
            lines += [f"{pad}{key} {{", *_fields(value, depth + 1), f"{pad}}}"]
        elif isinstance(value, list):
            if value and isinstance(value[0], Mapping):
                lines.append(f"{pad}{key} [")
                for index, item in enumerate(value):
                    closing = "}," if index < len(value) - 1 else "}"
                    lines += [f"{pad}  {{", *_fields(item, depth + 2), f"{pad}  {closing}"]
                lines.append(f"{pad}]")
            else:
                lines.append(f"{pad}{key}: [ {', '.join(_scalar(item) for item in value)} ]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return lines


def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    raise TypeError(f"no text format for {value!r} of type {type(value).__name__}")


def _quote(text: str) -> str:
    """A double-quoted string with C escapes: backslash, quote and every byte outside printable ASCII."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
