"""The error a failed engine build raises, with what TensorRT itself said.

TensorRT reports a failed parse through the ONNX parser's error list and a failed
build through its logger, and ``build_serialized_network`` only returns ``None``. The
useful part (the node the parser choked on, the layer the builder could not
implement) would be lost without collecting both, so they travel in the exception.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

MAX_MESSAGES = 20


@attrs.frozen
class ParserIssue:
    """One error of TensorRT's ONNX parser."""

    description: str
    code: str = ""
    node_index: int = -1
    node_name: str = ""
    node_operator: str = ""

    def describe(self) -> str:
        where = ""
        if self.node_name or self.node_operator or self.node_index >= 0:
            node = self.node_name or f"#{self.node_index}"
            where = f" at node {node}" + (f" ({self.node_operator})" if self.node_operator else "")
        code = f"{self.code}: " if self.code else ""
        return f"{code}{self.description}{where}"


class TensorRTBuildError(RuntimeError):
    """Parsing the ONNX model or building the engine failed.

    stage: ``"parse"``, ``"profile"`` or ``"build"``.
    parser_errors: the ONNX parser's errors (stage ``"parse"``).
    messages: ``(severity, text)`` that TensorRT logged at warning level or above.
    """

    def __init__(
        self,
        stage: str,
        summary: str,
        parser_errors: Sequence[ParserIssue] = (),
        messages: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.stage = stage
        self.summary = summary
        self.parser_errors = list(parser_errors)
        self.messages = list(messages)
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [self.summary]
        if self.parser_errors:
            lines.append("ONNX parser errors:")
            lines += [f"  {issue.describe()}" for issue in self.parser_errors[:MAX_MESSAGES]]
        errors = [(severity, text) for severity, text in self.messages if severity in ("INTERNAL_ERROR", "ERROR")]
        shown = errors or self.messages
        if shown:
            lines.append("TensorRT said:")
            lines += [f"  [{severity}] {' '.join(text.split())}" for severity, text in shown[-MAX_MESSAGES:]]
        return "\n".join(lines)
