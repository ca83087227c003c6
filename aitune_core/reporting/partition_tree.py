"""A partitioned graph as a tree: which submodule runs on which backend, and its share of eager time.

The same tree is printed by the tuning summary, by a loaded partition
(``PartitionBackend.tree()``) and by ``aitune inspect``, so all three read alike.
"""

from __future__ import annotations

import attrs


@attrs.define
class PartitionNode:
    """One submodule of a partition.

    path: where it sits below the partitioned module (``block1``, ``layers.0``).
    serves: what runs it: a backend's description, ``partitioned`` (its own children
        are, see ``children``) or ``eager (why)``.
    share: the fraction of the partitioned module's eager time spent in it (0..1), when measured.
    """

    path: str
    serves: str
    share: float | None = None
    children: list[PartitionNode] = attrs.field(factory=list)


def render_partition(title: str, nodes: list[PartitionNode]) -> str:
    """``title`` over one line per submodule, drawn as a tree, shares aligned at the right."""
    lines: list[tuple[str, str]] = []
    _walk(nodes, "", lines)
    width = max((len(text) for text, _ in lines), default=0)
    body = [f"{text.ljust(width)}  {share}".rstrip() for text, share in lines]
    return "\n".join([title, *body])


def _walk(nodes: list[PartitionNode], indent: str, lines: list[tuple[str, str]]) -> None:
    for index, node in enumerate(nodes):
        last = index == len(nodes) - 1
        lines.append((f"{indent}{'└── ' if last else '├── '}{node.path}  {node.serves}", _share(node.share)))
        _walk(node.children, indent + ("    " if last else "│   "), lines)


def _share(share: float | None) -> str:
    return "" if share is None else f"{share * 100:.0f}% of eager time"
