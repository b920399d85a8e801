"""The V3 schema (comfy_api.latest.io / ui) and its adapter to NodeSpec, plus entry-point discovery."""
from __future__ import annotations

import asyncio
import enum
from types import ModuleType

import pytest
import torch

from graph.errors import NodeDefinitionError
from graph.executor import Executor
from graph.expansion import ExecutionBlocker
from graph.object_info import node_info
from graph.registry import Registry
from graph.validation import validate_prompt


def _node(session):
    from comfy_api.latest import io, ui

    class Mode(enum.Enum):
        FAST = "fast"
        SLOW = "slow"

    class Scale(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(
                node_id="TestScale", display_name="Test Scale", category="test", description="scales",
                inputs=[io.Image.Input("image", tooltip="pixels"),
                        io.Float.Input("factor", default=1.0, min=0.0, max=4.0, step=0.5),
                        io.Combo.Input("mode", options=Mode, default=Mode.FAST),
                        io.String.Input("note", optional=True, multiline=True)],
                outputs=[io.Image.Output(display_name="scaled", tooltip="result"),
                         io.Int.Output("count", is_output_list=True)],
                hidden=[io.Hidden.unique_id, io.Hidden.prompt], is_output_node=True, not_idempotent=True)

        @classmethod
        def validate_inputs(cls, factor, input_types=None):
            return True

        @classmethod
        def fingerprint_inputs(cls, factor, **kw):
            return factor

        @classmethod
        def execute(cls, image, factor, mode, note=""):
            if factor == 0:
                return io.NodeOutput(block_execution="zero factor")
            return io.NodeOutput(image * factor, [1, 2], ui=ui.PreviewText(f"{cls.hidden.unique_id}/{mode}"))

    return Scale


def test_schema_becomes_a_node_spec(session):
    from compat.v3.adapter import spec_from_v3

    spec = spec_from_v3(_node(session), python_module="custom_nodes.test")
    assert (spec.node_id, spec.display_name, spec.category, spec.origin) == ("TestScale", "Test Scale", "test", "v3")
    assert spec.output_node and spec.not_idempotent and spec.python_module == "custom_nodes.test"
    # an output node also gets extra_pnginfo, as ComfyUI's Schema.finalize adds it
    assert [(i.name, i.section) for i in spec.inputs] == [("image", "required"), ("factor", "required"),
                                                         ("mode", "required"), ("note", "optional"),
                                                         ("unique_id", "hidden"), ("prompt", "hidden"),
                                                         ("extra_pnginfo", "hidden")]
    assert spec.input("mode").type == ["fast", "slow"] and spec.input("mode").options["default"] == "fast"
    assert dict(spec.input("factor").options) == {"default": 1.0, "min": 0.0, "max": 4.0, "step": 0.5}
    assert [(o.type, o.name, o.is_list, o.tooltip) for o in spec.outputs] == [
        ("IMAGE", "scaled", False, "result"), ("INT", "count", True, None)]
    behaviour = spec.behaviour
    assert behaviour.validate_params == frozenset({"factor"}) and behaviour.validate_takes_input_types
    assert behaviour.is_changed(factor=2.0, unique_id="9") == 2.0 and behaviour.check_lazy_status is None

    info = node_info(spec)
    assert info["input"]["required"]["mode"] == ["COMBO", {"default": "fast", "multiselect": False, "options": ["fast", "slow"]}]
    assert info["input"]["optional"]["note"] == ["STRING", {"multiline": True}]
    assert info["input"]["hidden"] == {"unique_id": ["UNIQUE_ID"], "prompt": ["PROMPT"],
                                       "extra_pnginfo": ["EXTRA_PNGINFO"]}  # V3's `(kind,)`
    assert info["output_name"] == ["scaled", "count"] and info["output_is_list"] == [False, True]


def test_execute_results_hidden_values_and_blocking(session):
    from compat.v3.adapter import spec_from_v3

    spec = spec_from_v3(_node(session))
    image = torch.ones(1, 2, 2, 3)
    out = spec.behaviour.call(None, image=image, factor=2.0, mode="slow", unique_id="4", prompt={})
    assert torch.equal(out["result"][0], image * 2) and out["result"][1] == [1, 2]
    assert out["ui"] == {"text": ["4/slow"]}
    blocked = spec.behaviour.call(None, image=image, factor=0.0, mode="fast", unique_id="4", prompt={})
    assert isinstance(blocked, ExecutionBlocker) and blocked.message == "zero factor"


def test_async_execute_returns_an_awaitable_v1_result(session):
    from comfy_api.latest import io

    from compat.v3.adapter import spec_from_v3

    class Later(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="Later", inputs=[io.Int.Input("x")], outputs=[io.Int.Output()])

        @classmethod
        async def execute(cls, x):
            await asyncio.sleep(0)
            return io.NodeOutput(x + 1)

    spec = spec_from_v3(Later)
    assert spec.behaviour.is_coroutine
    assert asyncio.run(spec.behaviour.call(None, x=1)) == {"result": (2,)}


def test_malformed_declarations_raise_typed_errors(session):
    from comfy_api.latest import io

    from compat.v3.adapter import spec_from_v3

    class NotV3:
        pass

    with pytest.raises(NodeDefinitionError, match="ComfyNode"):
        spec_from_v3(NotV3)

    class BadSchema(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return {"node_id": "x"}

    with pytest.raises(NodeDefinitionError, match="io.Schema"):
        spec_from_v3(BadSchema)
    with pytest.raises(TypeError, match="options"):
        io.Combo.Input("mode", options="abc")
    with pytest.raises(TypeError, match="non-empty"):
        io.Int.Input("")


async def test_v3_node_validates_and_runs_in_the_executor(session):
    from comfy_api.latest import io, ui

    from compat.v3.adapter import spec_from_v3

    class Add(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="V3Add", is_output_node=True,
                             inputs=[io.Int.Input("a", min=0, max=10), io.Combo.Input("op", options=["+", "-"])],
                             outputs=[io.Int.Output()], hidden=[io.Hidden.unique_id])

        @classmethod
        def execute(cls, a, op):
            value = a + 1 if op == "+" else a - 1
            return io.NodeOutput(value, ui=ui.PreviewText(f"{cls.hidden.unique_id}={value}"))

    registry = Registry()
    registry.add_spec(spec_from_v3(Add))
    bad = await validate_prompt({"1": {"class_type": "V3Add", "inputs": {"a": 11, "op": "*"}}}, registry)
    assert not bad.ok
    assert {e["type"] for e in bad.node_errors["1"]["errors"]} == {"value_bigger_than_max", "value_not_in_list"}
    prompt = {"1": {"class_type": "V3Add", "inputs": {"a": 4, "op": "-"}}}
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(
        prompt, "p", outputs=["1"])
    assert outcome.status == "success" and outcome.ui_outputs["1"] == {"text": ["1=3"]}


def test_v3_class_listed_in_node_class_mappings_gets_a_v1_face(session):
    from comfy_api.latest import io

    from graph.v1 import spec_from_v1

    class Listed(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="Listed", category="c", inputs=[io.Int.Input("x", default=2)],
                             outputs=[io.Int.Output(display_name="y")], hidden=[io.Hidden.unique_id])

        @classmethod
        def execute(cls, x):
            return io.NodeOutput(x * 3, ui={"who": [cls.hidden.unique_id]})

    assert Listed.RETURN_TYPES == ("INT",) and Listed.RETURN_NAMES == ("y",) and Listed.CATEGORY == "c"
    assert Listed.INPUT_TYPES() == {"required": {"x": ("INT", {"default": 2})}, "hidden": {"unique_id": ("UNIQUE_ID",)}}
    assert not hasattr(Listed, "VALIDATE_INPUTS")  # only when the node defines validate_inputs
    spec = spec_from_v1("Listed", Listed)
    assert spec.behaviour.call(spec.behaviour.make_instance(), x=2, unique_id="8") == {"result": (6,),
                                                                                      "ui": {"who": ["8"]}}


def test_ui_helpers(session, tmp_path):
    from comfy_api.latest import ui

    preview = ui.PreviewImage(torch.rand(2, 4, 4, 3))
    images = preview.as_dict()["images"]
    assert len(images) == 2 and all(i["type"] == "temp" for i in images)
    assert all((tmp_path / "temp" / i["subfolder"] / i["filename"]).is_file() for i in images)
    assert len(ui.PreviewMask(torch.rand(1, 4, 4)).as_dict()["images"]) == 1
    saved = ui.SavedImages([ui.SavedResult("a.png", "", "output")]).as_dict()
    assert saved == {"images": [{"filename": "a.png", "subfolder": "", "type": "output"}], "animated": [False]}
    with pytest.raises(TypeError, match="IMAGE"):
        ui.PreviewImage(torch.rand(4, 4))


def test_ui_preview_image_embeds_the_prompt_and_workflow_as_comfyui_does(session, tmp_path, monkeypatch):
    """ComfyUI's V3 helper writes the node's hidden prompt and extra_pnginfo as PNG text chunks
    (ImageSaveHelper._create_png_metadata), none with --disable-metadata."""
    from PIL import Image

    from comfy_api.latest import ui
    from compat.v3.io import HiddenHolder

    class Node:
        hidden = HiddenHolder(prompt={"1": {"class_type": "X"}}, extra_pnginfo={"workflow": {"nodes": []}})

    assert Node.hidden.unique_id is None and Node.hidden.comfy_usage_source is None  # unknown: None, as ComfyUI's

    def written(preview) -> dict:
        record = preview.as_dict()["images"][0]
        with Image.open(tmp_path / "temp" / record["subfolder"] / record["filename"]) as img:
            return dict(img.text)

    assert written(ui.PreviewImage(torch.rand(1, 4, 4, 3), cls=Node)) == {
        "prompt": '{"1": {"class_type": "X"}}', "workflow": '{"nodes": []}'}
    assert written(ui.PreviewImage(torch.rand(1, 4, 4, 3))) == {}  # no node, no metadata
    monkeypatch.setattr(session.env, "disable_metadata", True)
    assert written(ui.PreviewImage(torch.rand(1, 4, 4, 3), cls=Node)) == {}


def test_entrypoint_discovery_registers_nodes_and_reports_failures(session):
    from comfy_api.latest import ComfyExtension, io

    from compat.v3.discovery import register_entrypoint

    class Node(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="FromEntry", outputs=[io.Int.Output()])

        @classmethod
        def execute(cls):
            return io.NodeOutput(1)

    class Extension(ComfyExtension):
        async def get_node_list(self):
            return [Node, Node]  # the second is a duplicate id

    good = ModuleType("good_pack")
    good.comfy_entrypoint = lambda: Extension()
    registry = session.registry
    register_entrypoint(session, good, "good_pack", registry)
    assert "FromEntry" in registry and session.v3_nodes["good_pack"] == ["FromEntry"]
    assert "already registered" in session.v3_errors["good_pack"]

    async def failing():
        raise RuntimeError("entrypoint exploded")

    bad = ModuleType("bad_pack")
    bad.comfy_entrypoint = failing
    register_entrypoint(session, bad, "bad_pack", registry)
    assert "entrypoint exploded" in session.v3_errors["bad_pack"] and "bad_pack" not in session.v3_nodes
