"""Packs register node replacements through the V3 API, as in today's ComfyUI:
`await ComfyAPI().node_replacement.register(io.NodeReplace(...))` (or `ComfyAPISync`), into the
table of the server they run in: GET /node_replacements serves it and POST /prompt applies it."""
from __future__ import annotations

import textwrap
from types import SimpleNamespace

import aiohttp
import pytest

from web.node_replacements import NodeReplacements

PACK = textwrap.dedent('''
    from comfy_api.latest import ComfyAPI, ComfyAPISync, ComfyExtension, io, ui

    # at import, the sync form (before the server exists)
    ComfyAPISync().node_replacement.register(io.NodeReplace(new_node_id="ReplPackDouble",
                                                            old_node_id="ReplPackAncient"))


    class Double(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="ReplPackDouble", inputs=[io.Int.Input("value"), io.Int.Input("extra", default=0)],
                             outputs=[], is_output_node=True)

        @classmethod
        def execute(cls, value, extra=0):
            return io.NodeOutput(ui=ui.PreviewText(str(value * 2 + extra)))


    class Ext(ComfyExtension):
        async def on_load(self):
            await ComfyAPI().node_replacement.register(io.NodeReplace(
                new_node_id="ReplPackDouble", old_node_id="ReplPackOld",
                old_widget_ids=["number"],
                input_mapping=[{"new_id": "value", "old_id": "number"}, {"new_id": "extra", "set_value": 1}]))

        async def get_node_list(self):
            return [Double]


    async def comfy_entrypoint():
        return Ext()
''')


def test_the_record_checks_comfyuis_shapes(session):
    from comfy_api.latest import io

    ok = io.NodeReplace("New", "Old", ["a"], [{"new_id": "x", "old_id": "a"}, {"new_id": "y", "set_value": None}],
                        [{"old_idx": 1, "new_idx": 0}])
    assert ok.as_dict() == {"new_node_id": "New", "old_node_id": "Old", "old_widget_ids": ["a"],
                            "input_mapping": [{"new_id": "x", "old_id": "a"}, {"new_id": "y", "set_value": None}],
                            "output_mapping": [{"old_idx": 1, "new_idx": 0}]}
    assert io.NodeReplace("New", "Old", input_mapping=[]).as_dict()["input_mapping"] is None
    bad = [dict(new_node_id="", old_node_id="Old"), dict(new_node_id="New", old_node_id=3),
           dict(new_node_id="N", old_node_id="O", input_mapping=[{"new_id": "x"}]),
           dict(new_node_id="N", old_node_id="O", input_mapping=[{"new_id": "x", "old_id": "a", "set_value": 1}]),
           dict(new_node_id="N", old_node_id="O", input_mapping={"new_id": "x", "old_id": "a"}),
           dict(new_node_id="N", old_node_id="O", output_mapping=[{"old_idx": "0", "new_idx": 0}]),
           dict(new_node_id="N", old_node_id="O", old_widget_ids="abc")]
    for fields in bad:
        with pytest.raises(io.NodeReplaceError):
            io.NodeReplace(**fields)


def test_registrations_before_the_server_exists_reach_its_table_at_bind(session, tmp_path):
    from comfy_api.latest import ComfyAPI, ComfyAPISync, io

    import asyncio

    ComfyAPISync().node_replacement.register(io.NodeReplace("B", "A"))
    asyncio.run(ComfyAPI().node_replacement.register(io.NodeReplace("C", "A")))
    ComfyAPISync().node_replacement.register(io.NodeReplace("B", "A"))  # idempotent per pair, as ComfyUI
    with pytest.raises(io.NodeReplaceError):
        ComfyAPISync().node_replacement.register({"new_node_id": "B", "old_node_id": "A"})
    state = SimpleNamespace(pack_app=None, packs=[], extra_routes=[], on_prompt_handlers=[],
                            node_replacements=NodeReplacements())
    session.bind(state)
    assert [r["new_node_id"] for r in state.node_replacements.as_dict()["A"]] == ["B", "C"]
    ComfyAPISync().node_replacement.register(io.NodeReplace("D", "Z"))  # after bind: straight in
    assert state.node_replacements.get("Z")[0].new_node_id == "D"


async def test_a_v3_pack_registers_replacements_the_server_serves_and_applies(tmp_path):
    from tests.web.web_harness import TestServer
    from web.app import start_server
    from web.bootstrap import build_state
    from web.config import ServerConfig

    pack = tmp_path / "custom_nodes" / "repl_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PACK)
    config = ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0,
                          custom_node_dirs=(tmp_path / "custom_nodes",))
    state = build_state(config)
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    try:
        table = await server.get_json("/node_replacements")
        assert table["ReplPackOld"] == [{"new_node_id": "ReplPackDouble", "old_node_id": "ReplPackOld",
                                         "old_widget_ids": ["number"],
                                         "input_mapping": [{"new_id": "value", "old_id": "number"},
                                                           {"new_id": "extra", "set_value": 1}],
                                         "output_mapping": None}]
        assert table["ReplPackAncient"][0]["new_node_id"] == "ReplPackDouble"
        status, body = await server.post_prompt({"7": {"class_type": "ReplPackOld", "inputs": {"number": 20}}})
        assert status == 200, body
        entry = await server.wait_history(body["prompt_id"])
        assert entry["outputs"]["7"] == {"text": ["41"]}
    finally:
        await server.close()
