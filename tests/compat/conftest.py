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
    """Models load as ComfyUI's comfy.model_base classes, in ComfyUI's ModelPatcher, in every
    compat test, as in a server (a session's node calls have its extension points in force;
    module-scoped model fixtures load before any session, so the same ones are in force for the
    whole test run)."""
    from comfy_core import extension_points
    from comfy_core.extension_points import ExtensionPoints
    from compat.mp_model_classes import install_model_classes

    points = ExtensionPoints()
    install_model_classes(points)
    token = extension_points.set_current(points)
    yield
    extension_points.reset_current(token)
