"""ComfyUI's `nodes.load_custom_node` and `init_extra_nodes` while the server runs, as hot-reload
packs (LG_HotReload: `from nodes import load_custom_node`, then `load_custom_node(path)` for an
edited pack) and server-building scripts (ComfyUI-to-Python-Extension: `init_extra_nodes()`)
call them: a reloaded pack's next prompt runs its new code (no result of the old code is
reused), a new pack's nodes appear, a broken one answers False and the server goes on."""
from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from tests.compat.compat_harness import run_prompt, start_pack_server

LOADER = '''
from aiohttp import web
from nodes import init_extra_nodes, load_custom_node
from server import PromptServer


@PromptServer.instance.routes.post("/hot/load")
async def load(request):
    body = await request.json()
    return web.json_response({"loaded": await load_custom_node(body["path"])})


@PromptServer.instance.routes.post("/hot/init")
async def init(request):
    return web.json_response({"failed": await init_extra_nodes()})

NODE_CLASS_MAPPINGS = {}
'''


def _value_pack(value: int, default: int = 1) -> str:
    return textwrap.dedent(f'''
        import nodes


        class ReloadValue:
            CATEGORY = "reload"
            RETURN_TYPES = ("INT",)
            FUNCTION = "run"

            @classmethod
            def INPUT_TYPES(cls):
                return {{"required": {{"scale": ("INT", {{"default": {default}}})}}}}

            def run(self, scale):
                return ({value} * scale,)


        class ShowInt:
            CATEGORY = "reload"
            RETURN_TYPES = ()
            FUNCTION = "show"
            OUTPUT_NODE = True

            @classmethod
            def INPUT_TYPES(cls):
                return {{"required": {{"value": ("INT", {{"forceInput": True}})}}}}

            def show(self, value):
                # what a pack bound at import reads now: the class the last load registered
                mapped = nodes.NODE_CLASS_MAPPINGS["ReloadValue"]().run(1)[0]
                return {{"ui": {{"value": [value], "mapped": [mapped]}}}}


        NODE_CLASS_MAPPINGS = {{"ReloadValue": ReloadValue, "ShowInt": ShowInt}}
        ''')


PROMPT = {"1": {"class_type": "ReloadValue", "inputs": {"scale": 3}},
          "2": {"class_type": "ShowInt", "inputs": {"value": ["1", 0]}}}


@pytest.fixture
async def hot_server(tmp_path):
    packs = tmp_path / "packs"
    (packs / "hot_loader").mkdir(parents=True)
    (packs / "hot_loader" / "__init__.py").write_text(textwrap.dedent(LOADER))
    (packs / "value_pack").mkdir()
    (packs / "value_pack" / "__init__.py").write_text(_value_pack(1))
    srv = await start_pack_server(tmp_path / "base", custom_node_dirs=(packs,))
    srv.packs_dir = packs
    try:
        yield srv
    finally:
        await srv.close()


async def _load(srv, path: Path) -> bool:
    async with srv.session.post(f"{srv.url}/hot/load", json={"path": str(path)}) as resp:
        assert resp.status == 200, await resp.text()
        return (await resp.json())["loaded"]


async def test_a_reloaded_pack_runs_its_new_code(hot_server):
    srv = hot_server
    entry = await run_prompt(srv, PROMPT)
    assert entry["outputs"]["2"]["value"] == [3] and entry["outputs"]["2"]["mapped"] == [1]

    (srv.packs_dir / "value_pack" / "__init__.py").write_text(_value_pack(10, default=7))
    assert await _load(srv, srv.packs_dir / "value_pack") is True
    entry = await run_prompt(srv, PROMPT)  # the same prompt: not the old code's cached 3
    assert entry["outputs"]["2"]["value"] == [30] and entry["outputs"]["2"]["mapped"] == [10]
    info = await srv.get_json("/object_info/ReloadValue")
    assert info["ReloadValue"]["input"]["required"]["scale"][1]["default"] == 7
    status = [p for p in srv.state.packs if p.name == "value_pack"]
    assert len(status) == 1 and status[0].ok and status[0].nodes == ["ReloadValue", "ShowInt"]
    again = await run_prompt(srv, PROMPT)  # and now cached again, as usual
    assert again["outputs"]["2"]["value"] == [30]


async def test_new_packs_load_broken_ones_answer_false_and_init_extra_nodes_loads_the_rest(hot_server, tmp_path):
    srv = hot_server
    other = tmp_path / "elsewhere" / "new_pack.py"
    other.parent.mkdir()
    other.write_text("class NewNode:\n    CATEGORY = 'x'\n    RETURN_TYPES = ('INT',)\n    FUNCTION = 'run'\n"
                     "    @classmethod\n    def INPUT_TYPES(cls):\n        return {'required': {}}\n"
                     "    def run(self):\n        return (5,)\nNODE_CLASS_MAPPINGS = {'NewNode': NewNode}\n")
    assert await _load(srv, other) is True
    assert "NewNode" in await srv.get_json("/object_info")

    broken = tmp_path / "elsewhere" / "broken_pack.py"
    broken.write_text("raise RuntimeError('this pack is broken')\n")
    assert await _load(srv, broken) is False
    no_nodes = tmp_path / "elsewhere" / "no_nodes.py"
    no_nodes.write_text("X = 1\n")
    assert await _load(srv, no_nodes) is False
    entry = await run_prompt(srv, PROMPT)
    assert entry["status"]["status_str"] == "success"

    # a pack dropped into custom_nodes after the start: init_extra_nodes loads it, not the others again
    late = srv.packs_dir / "late_pack.py"
    late.write_text(other.read_text().replace("NewNode", "LateNode"))
    async with srv.session.post(f"{srv.url}/hot/init") as resp:
        assert resp.status == 200 and (await resp.json()) == {"failed": []}
    assert "LateNode" in await srv.get_json("/object_info")
    assert [p.name for p in srv.state.packs].count("value_pack") == 1
    prompt_id = str(uuid.uuid4())
    status, _ = await srv.post_prompt({"1": {"class_type": "LateNode", "inputs": {}},
                                       "2": {"class_type": "ShowInt", "inputs": {"value": ["1", 0]}}},
                                      prompt_id=prompt_id)
    assert status == 200
    assert (await srv.wait_history(prompt_id, timeout=60))["outputs"]["2"]["value"] == [5]


def _v3_pack(value: int) -> str:
    return textwrap.dedent(f'''
        from comfy_api.latest import ComfyExtension, io


        class V3Value(io.ComfyNode):
            @classmethod
            def define_schema(cls):
                return io.Schema(node_id="V3Value", category="reload", inputs=[io.Int.Input("scale", default=1)],
                                 outputs=[io.Int.Output()])

            @classmethod
            def execute(cls, scale):
                return io.NodeOutput({value} * scale)


        class Extension(ComfyExtension):
            async def get_node_list(self):
                return [V3Value]


        async def comfy_entrypoint():
            return Extension()
        ''')


async def test_a_reloaded_v3_pack_runs_its_new_code(hot_server):
    srv = hot_server
    pack = srv.packs_dir / "v3_value_pack"
    pack.mkdir()
    (pack / "__init__.py").write_text(_v3_pack(2))
    assert await _load(srv, pack) is True
    prompt = {"1": {"class_type": "V3Value", "inputs": {"scale": 5}},
              "2": {"class_type": "ShowInt", "inputs": {"value": ["1", 0]}}}
    assert (await run_prompt(srv, prompt))["outputs"]["2"]["value"] == [10]
    (pack / "__init__.py").write_text(_v3_pack(3))
    assert await _load(srv, pack) is True
    assert (await run_prompt(srv, prompt))["outputs"]["2"]["value"] == [15]
