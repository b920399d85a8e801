"""Tests stay order-independent: what a server built in one test leaves behind (its compat
session selected in the main thread's context, the import hook) is put back before the next
(tests/compat/isolation.py, wired in by the autouse fixture of tests/conftest.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.compat.isolation import restore, snapshot

REPO = Path(__file__).resolve().parents[2]


class _State:
    """The members `CompatSession.bind` touches on web.state.AppState."""

    def __init__(self) -> None:
        self.extra_routes: list = []
        self.on_prompt_handlers: list = []


def test_restore_undoes_what_bind_and_a_node_call_set_in_this_context(tmp_path):
    import compat
    import compat.graph_builder  # noqa: F401 -- imported first, so the snapshot holds its variable
    from compat.graph_builder import GraphBuilder
    from compat.active import _active
    from graph.registry import Registry
    from nodes.environment import Environment

    saved = snapshot()
    session = compat.install(Environment.rooted_at(tmp_path), Registry())
    session.bind(_State())  # what build_state does, here in the test's own context
    session.before_node_call("4", 0, 0)  # what the executor does before a node call
    GraphBuilder.set_default_prefix("9", 1)
    assert _active.get() is session
    assert snapshot() != saved

    restore(saved)
    assert snapshot() == saved
    assert _active.get() is saved.values[("compat.active", "_active")]
    assert [f for f in sys.meta_path if type(f).__name__ == "ComfyModuleFinder"] == \
        ([saved.finder] if saved.finder is not None else [])


# Two synchronous tests in one process, in the order that used to fail: a server built in the
# first stayed the "active" session of the second, hiding its own most recent install.
_PAIR = '''
def test_first_builds_a_server(tmp_path):
    from graph.registry import Registry
    from web.bootstrap import build_state
    from web.config import ServerConfig

    state = build_state(ServerConfig(base_dir=tmp_path, custom_node_dirs=()), registry=Registry())
    state.store.close()


def test_second_sees_its_most_recent_install(tmp_path):
    import compat
    from compat.session import active
    from graph.registry import Registry
    from nodes.environment import Environment

    mine = compat.install(Environment.rooted_at(tmp_path), Registry())
    assert active() is mine
'''


def test_a_server_built_in_one_test_is_not_active_in_the_next(tmp_path):
    (tmp_path / "test_pair.py").write_text(textwrap.dedent(_PAIR))
    # -p tests.conftest: this suite's shared fixtures (the autouse restore among them) as a plugin.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "tmp"),
                           str(tmp_path / "test_pair.py")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
