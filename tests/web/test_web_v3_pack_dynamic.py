"""A V3 pack with today's dynamic inputs, end to end through a real server: /object_info shows
ComfyUI's entries and a prompt in the editor's flat spelling (`values.v0`, `mode.width`) runs the
node with ComfyUI's nested values."""
from __future__ import annotations

import textwrap

import aiohttp

PACK = textwrap.dedent('''
    from comfy_api.latest import ComfyExtension, io, ui


    class Sum(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="DynPackSum", is_output_node=True, inputs=[
                io.Autogrow.Input("values", template=io.Autogrow.TemplatePrefix(io.Int.Input("v"), prefix="v", max=4)),
                io.DynamicCombo.Input("mode", options=[
                    io.DynamicCombo.Option("plain", []),
                    io.DynamicCombo.Option("scaled", [io.Int.Input("by", default=2)])])],
                outputs=[])

        @classmethod
        def execute(cls, values, mode):
            total = sum(values.values()) * (mode["by"] if mode["mode"] == "scaled" else 1)
            return io.NodeOutput(ui=ui.PreviewText(f"{sorted(values)} {mode} {total}"))


    class Ext(ComfyExtension):
        async def get_node_list(self):
            return [Sum]


    async def comfy_entrypoint():
        return Ext()
''')


async def test_dynamic_inputs_render_and_run_through_the_server(tmp_path):
    from tests.web.web_harness import TestServer
    from web.app import start_server
    from web.bootstrap import build_state
    from web.config import ServerConfig

    pack = tmp_path / "custom_nodes" / "dyn_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PACK)
    state = build_state(ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0,
                                     custom_node_dirs=(tmp_path / "custom_nodes",)))
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    try:
        info = (await server.get_json("/object_info/DynPackSum"))["DynPackSum"]
        assert info["input"]["required"]["values"] == ["COMFY_AUTOGROW_V3", {"template": {
            "input": {"required": {"v": ["INT", {"forceInput": True}]}}, "prefix": "v", "min": 1, "max": 4}}]
        assert info["input"]["required"]["mode"][0] == "COMFY_DYNAMICCOMBO_V3"
        assert [o["key"] for o in info["input"]["required"]["mode"][1]["options"]] == ["plain", "scaled"]
        status, body = await server.post_prompt({"5": {"class_type": "DynPackSum", "inputs": {
            "values.v0": 1, "values.v2": 4, "mode": "scaled", "mode.by": 3}}})
        assert status == 200, body
        entry = await server.wait_history(body["prompt_id"])
        assert entry["outputs"]["5"] == {"text": ["['v0', 'v2'] {'mode': 'scaled', 'by': 3} 15"]}
        status, body = await server.post_prompt({"5": {"class_type": "DynPackSum", "inputs": {"mode": "plain"}}})
        assert status == 400 and "5" in body["node_errors"]  # values.v0 (the first of `min`) is required
    finally:
        await server.close()
