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


@pytest.fixture(scope="session", autouse=True)
def comfy_model_classes():
    """Models load as ComfyUI's comfy.model_base classes in every compat test, as in a server
    (compat.install sets this before any model loads; module-scoped model fixtures load first)."""
    from comfy_core.models import family_classes
    from compat.mp_model_classes import install_model_classes

    install_model_classes()
    yield
    family_classes.set_resolver(None)
