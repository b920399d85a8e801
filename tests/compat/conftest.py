"""A compat session over a temporary environment, active for the test (no server)."""
from __future__ import annotations

import pytest


@pytest.fixture
def session(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    sess = compat.install(env, Registry())
    with sess.activate():
        yield sess
