"""The node tree of one ChatGPT conversation (`mapping`), checked before anything is
converted.

Each node names its `parent` and its `children`. The parent links decide the tree (a
child list is only the order of the children); a child id that names no node is ignored,
since nothing is lost with it. What makes the tree unreadable is refused, each problem
with its JSON path: a node that is not an object, a parent that is not in the mapping, no
root or more than one, and nodes that cannot be reached from the root (their parents form
a cycle).
"""

from dataclasses import dataclass
from typing import Any

from conversations.errors import Problem
from conversations.validation import key_path, type_name

# Problems reported per conversation: enough to fix a file, bounded for a garbage one.
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class Tree:
    """A readable mapping: the root's id (None when the mapping is empty), each node's
    children in order, and the nodes themselves."""

    root: str | None
    children: dict[str, list[str]]
    nodes: dict[str, dict[str, Any]]


def node_path(base: str, node_id: str) -> str:
    return key_path(f"{base}.mapping", node_id)


def capped(problems: list[Problem], base: str) -> list[Problem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    more = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], Problem(base, f"and {more} more problems")]


def _node_problems(node_id: str, node: Any, nodes: dict[str, Any], base: str) -> list[Problem]:
    path = node_path(base, node_id)
    if not isinstance(node, dict):
        return [Problem(path, f"must be an object, not {type_name(node)}")]
    problems = []
    parent = node.get("parent")
    if parent is not None and not isinstance(parent, str):
        problems.append(Problem(f"{path}.parent", f"must be a node id, not {type_name(parent)}"))
    elif isinstance(parent, str) and parent not in nodes:
        problems.append(Problem(f"{path}.parent", f"{parent[:80]!r} is not in the mapping"))
    children = node.get("children", [])
    if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
        problems.append(Problem(f"{path}.children", "must be an array of node ids"))
    message = node.get("message")
    if message is not None and not isinstance(message, dict):
        problems.append(
            Problem(f"{path}.message", f"must be an object or null, not {type_name(message)}")
        )
    elif isinstance(message, dict):
        author = message.get("author")
        role = author.get("role") if isinstance(author, dict) else None
        if not isinstance(role, str):
            problems.append(Problem(f"{path}.message.author.role", "must be a string"))
    return problems


def _ordered_children(nodes: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Each node's children: those its child list names (whose parent agrees) in that
    order, then any others that name it as parent, in mapping order."""
    children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    listed: set[tuple[str, str]] = set()
    for node_id, node in nodes.items():
        for child in node.get("children", []):
            agrees = child in nodes and nodes[child].get("parent") == node_id
            if agrees and (node_id, child) not in listed:
                listed.add((node_id, child))
                children[node_id].append(child)
    for node_id, node in nodes.items():
        parent = node.get("parent")
        if isinstance(parent, str) and (parent, node_id) not in listed:
            children[parent].append(node_id)
    return children


def tree_read(mapping: Any, *, base: str) -> Tree | list[Problem]:
    """The tree of `mapping`, or every problem that makes it unreadable."""
    path = f"{base}.mapping"
    if not isinstance(mapping, dict):
        return [Problem(path, f"must be an object, not {type_name(mapping)}")]
    problems = [
        p for key, node in mapping.items() for p in _node_problems(key, node, mapping, base)
    ]
    if problems:
        return capped(problems, base)
    nodes: dict[str, dict[str, Any]] = mapping
    if not nodes:
        return Tree(root=None, children={}, nodes={})
    roots = [node_id for node_id, node in nodes.items() if node.get("parent") is None]
    if len(roots) != 1:
        found = ", ".join(repr(r[:40]) for r in roots[:5]) if roots else "none"
        return [Problem(path, f"must have exactly one root node (parent null); found {found}")]
    children = _ordered_children(nodes)
    reached = {roots[0]}
    stack = [roots[0]]
    while stack:
        for child in children[stack.pop()]:
            if child not in reached:
                reached.add(child)
                stack.append(child)
    unreached = [node_id for node_id in nodes if node_id not in reached]
    if unreached:
        return capped(
            [
                Problem(
                    node_path(base, node_id),
                    "cannot be reached from the root node: its parents form a cycle",
                )
                for node_id in unreached
            ],
            base,
        )
    return Tree(root=roots[0], children=children, nodes=nodes)
