"""/features and the WebSocket `feature_flags` answer: the core flags plus `--feature-flag k=v`
(ComfyUI's comfy_api/feature_flags.py registry), and `comfyui_version` in /system_stats."""
from __future__ import annotations

import argparse

import pytest

from compat.feature_flags import FeatureFlagError, parse_feature_flag, parse_feature_flags, server_features
from compat.version import COMFYUI_VERSION
from tests.web.web_harness import receive_json, start_test_server
from web.flags import add_server_flags


def test_values_take_the_registered_type_and_others_stay_text():
    assert parse_feature_flags(["show_signin_button=true", "enable_telemetry=False", "partner_run_gate_enabled",
                                "supports_terminal=false", "team = blue"]) == {
        "show_signin_button": True, "enable_telemetry": False, "partner_run_gate_enabled": True,
        "supports_terminal": "false", "team": "blue"}
    for bad in ("show_signin_button=ture", "=x", "show_signin_button=1"):
        with pytest.raises(FeatureFlagError):
            parse_feature_flag(bad)


def test_cli_flags_never_overwrite_core_flags():
    core = {"max_upload_size": 10, "node_replacements": True}
    assert server_features(core, ["max_upload_size=1", "node_replacements=false", "x=1"]) == {
        "max_upload_size": 10, "node_replacements": True, "x": "1"}


def test_the_command_line_takes_repeated_flags_and_refuses_bad_registered_values(capsys):
    parser = argparse.ArgumentParser()
    add_server_flags(parser)
    args = parser.parse_args(["--feature-flag", "show_signin_button=true", "--feature-flag", "beta"])
    assert args.feature_flag == ["show_signin_button=true", "beta"]  # ComfyUI's args.feature_flag
    assert parser.parse_args([]).feature_flag == []
    with pytest.raises(SystemExit):
        parser.parse_args(["--feature-flag", "enable_telemetry=maybe"])
    assert "enable_telemetry" in capsys.readouterr().err


async def test_features_and_the_websocket_answer_carry_the_cli_flags(tmp_path):
    flags = {"feature_flag": ["show_signin_button=true", "supports_terminal=false", "max_upload_size=1"]}
    server = await start_test_server(tmp_path, comfy_flags=flags)
    try:
        features = await server.get_json("/features")
        assert features["show_signin_button"] is True and features["supports_terminal"] == "false"
        assert features["max_upload_size"] == server.state.config.max_upload_bytes  # core wins
        assert features["node_replacements"] is True and features["supports_preview_metadata"] is True
        assert features["assets"] is False
        assert (await server.get_json("/api/features")) == features
    finally:
        await server.close()


async def test_ws_feature_flags_reply_matches_features(tmp_path):
    server = await start_test_server(tmp_path, comfy_flags={"feature_flag": ["enable_telemetry"]})
    try:
        ws = await server.session.ws_connect(f"{server.url}/ws?clientId=ff")
        await ws.receive(timeout=10)
        await ws.send_json({"type": "feature_flags", "data": {}})
        reply = await receive_json(ws, lambda m: m["type"] == "feature_flags")
        assert reply["data"] == await server.get_json("/features")
        assert reply["data"]["enable_telemetry"] is True
        await ws.close()
    finally:
        await server.close()


async def test_system_stats_reports_the_one_comfyui_version(server):
    stats = await server.get_json("/system_stats")
    assert stats["system"]["comfyui_version"] == COMFYUI_VERSION
    major, minor, patch = (int(p) for p in COMFYUI_VERSION.split("."))
    assert (major, minor) >= (0, 4)  # a 2026 release: packs' supported_comfyui_version ranges accept it
