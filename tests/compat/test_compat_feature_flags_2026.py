"""`comfy_api.feature_flags` for packs answers with the server's `--feature-flag` items and the
registry of known flags, as today's ComfyUI's module does."""
from __future__ import annotations

import pytest


@pytest.fixture
def flagged_session(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    sess = compat.install(env, Registry(), comfy_args={
        "max_upload_size": 2, "enable_assets": True,
        "feature_flag": ["show_signin_button", "max_upload_size=1", "channel=beta"]})
    with sess.activate():
        yield sess


def test_server_features_merge_the_cli_flags_without_overwriting_core_ones(flagged_session):
    from comfy_api import feature_flags

    assert feature_flags.get_server_features() == {
        "supports_preview_metadata": True, "max_upload_size": 2 * 1024 * 1024, "node_replacements": True,
        "assets": True, "show_signin_button": True, "channel": "beta"}
    # The module constant is computed once per process, from the flags of the first session that
    # reads it (ComfyUI computes it at import); forget what an earlier test's session cached.
    vars(feature_flags).pop("SERVER_FEATURE_FLAGS", None)
    assert feature_flags.SERVER_FEATURE_FLAGS == feature_flags.get_server_features()
    registry = feature_flags.CLI_FEATURE_FLAG_REGISTRY
    assert set(registry) == {"show_signin_button", "enable_telemetry", "partner_run_gate_enabled"}
    assert registry["partner_run_gate_enabled"] == {
        "type": "bool", "default": True,
        "description": "Gate the local Run button behind sign-in when the graph contains partner nodes"}
    with pytest.raises(TypeError):
        registry["new_flag"] = {}  # read-only: no pack changes what another server answers
