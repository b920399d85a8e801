"""Running test code as the executor runs a node: the node context its input errors and file
writes take the node's id, type and environment from."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment


@contextmanager
def running_node(class_type: str, node_id: str = "1", env: Any = None) -> Iterator[None]:
    token = set_current(NodeContext("p", node_id, node_id, None, env, class_type=class_type))
    try:
        yield
    finally:
        reset_current(token)


def folders_env(tmp_path: Path) -> Environment:
    """An environment under `tmp_path / "base"` with its input, output and temp folders made."""
    environment = Environment.rooted_at(tmp_path / "base")
    environment.ensure_dirs()
    return environment
