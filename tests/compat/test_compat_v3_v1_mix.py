"""A V3 extension's `get_node_list()` holding V1 node classes (survey finding a1).

ComfyUI's `load_custom_node` (V3 branch) registers every listed class by
`node_cls.GET_SCHEMA().node_id`, with `schema.display_name` as display name when not None, and
then serves and runs a V1 class as the V1 node it is. sd-perturbed-attention and ComfyUI-ppm rely
on it: their `v3_schema_stub` gives V1 classes a `GET_SCHEMA` returning a dataclass holding only
`node_id` and `display_name`. A listed class that is no node fails alone.
"""
from __future__ import annotations

import json
import textwrap
import uuid
from dataclasses import dataclass
from types import ModuleType

from graph.executor import Executor
from tests.graph.helpers import node, run_prompt


@dataclass
class SchemaStub:  # the packs' stub: nothing but the two fields ComfyUI's loader reads
    node_id: str
    display_name: str | None


def stub(cls: type, node_id: str, display_name: str | None = None) -> type:
    schema = SchemaStub(node_id, display_name)
    cls.GET_SCHEMA = lambda: schema  # as the packs set it: a plain function on the class
    return cls


def _extension(classes: list):
    from comfy_api.latest import ComfyExtension

    class Extension(ComfyExtension):
        async def get_node_list(self):
            return classes

    return Extension()


def _classes():
    from comfy_api.latest import io

    class V3Twice(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="MixV3Twice", inputs=[io.Int.Input("value")], outputs=[io.Int.Output()])

        @classmethod
        def execute(cls, value):
            return io.NodeOutput(value * 2)

    class PlusOne:  # a V1 class with a display name in its stub
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"value": ("INT", {"default": 0, "min": -10, "max": 10})}}

        RETURN_TYPES = ("INT",)
        FUNCTION = "run"
        CATEGORY = "mix"

        def run(self, value):
            return (value + 1,)

    class Show:  # a V1 output node, no display name
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"value": ("INT",)}}

        RETURN_TYPES = ()
        FUNCTION = "run"
        OUTPUT_NODE = True

        def run(self, value):
            return {"ui": {"value": [value]}}

    class Unnamed:  # V1, but nothing names it
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}}

        RETURN_TYPES = ()
        FUNCTION = "run"

    class NotANode:
        pass

    return [V3Twice, stub(PlusOne, "MixPlusOne", "Mix: plus one"), Unnamed, stub(Show, "MixShow"), NotANode]


def test_listed_v1_classes_register_as_v1_nodes_named_by_their_schema(session):
    from compat.v3.discovery import register_entrypoint

    classes = _classes()
    pack = ModuleType("mixed_pack")
    pack.comfy_entrypoint = lambda: _extension(classes)
    registry = session.registry
    register_entrypoint(session, pack, "mixed_pack", registry)

    # every node that can be registered is, in the list's order; the two others fail alone
    assert session.v3_nodes["mixed_pack"] == ["MixV3Twice", "MixPlusOne", "MixShow"]
    errors = session.v3_errors["mixed_pack"]
    assert "Unnamed: " in errors and "GET_SCHEMA" in errors
    assert "NotANode: " in errors and "io.ComfyNode subclass or a V1 node class" in errors

    plus, show = registry.get("MixPlusOne"), registry.get("MixShow")
    assert plus.origin == show.origin == "v1" and plus.source is classes[1]
    assert registry.get("MixV3Twice").origin != "v1"
    assert plus.python_module == show.python_module == "custom_nodes.mixed_pack"
    assert (plus.display_name, show.display_name) == ("Mix: plus one", "MixShow")  # the id when the stub has none

    # served as the V1 node it is: INPUT_TYPES as returned, its class attributes
    info = json.loads(json.dumps(registry.object_info()))
    assert info["MixPlusOne"]["input"] == {"required": {"value": ["INT", {"default": 0, "min": -10, "max": 10}]}}
    assert info["MixPlusOne"]["display_name"] == "Mix: plus one" and info["MixPlusOne"]["category"] == "mix"
    assert info["MixPlusOne"]["output"] == ["INT"] and info["MixShow"]["output_node"] is True
    assert info["MixPlusOne"]["python_module"] == "custom_nodes.mixed_pack"


async def test_listed_v1_nodes_validate_and_run_beside_the_v3_ones(session):
    from compat.v3.discovery import register_entrypoint
    from graph.validation import validate_prompt

    pack = ModuleType("mixed_pack")
    pack.comfy_entrypoint = lambda: _extension(_classes())
    register_entrypoint(session, pack, "mixed_pack", session.registry)

    prompt = {"1": node("MixPlusOne", value=4), "2": node("MixV3Twice", value=["1", 0]),
              "3": node("MixShow", value=["2", 0])}
    outcome = await run_prompt(Executor(session.registry, env=session.env), prompt, str(uuid.uuid4()))
    assert outcome.status == "success" and outcome.ui_outputs["3"] == {"value": [10]}

    too_big = {"1": node("MixPlusOne", value=11), "3": node("MixShow", value=["1", 0])}
    result = await validate_prompt(too_big, session.registry)
    [error] = result.node_errors["1"]["errors"]
    assert error["type"] == "value_bigger_than_max"  # the V1 declaration's options are in force


def test_a_pack_folder_with_the_packs_stub_loads_every_node(session, tmp_path):
    """The whole path: a pack folder whose async entry point lists stubbed V1 classes (the shape of
    sd-perturbed-attention's `__init__.py` and `compat/utils.py`)."""
    pack = tmp_path / "custom_nodes" / "stubbed_pack"
    pack.mkdir(parents=True)
    (pack / "v1_nodes.py").write_text(textwrap.dedent('''
        class Perturb:
            @classmethod
            def INPUT_TYPES(cls):
                return {"required": {"scale": ("FLOAT", {"default": 3.0})}}

            RETURN_TYPES = ("FLOAT",)
            FUNCTION = "run"

            def run(self, scale):
                return (scale,)

        NODE_CLASS_MAPPINGS = {"StubPerturb": Perturb}
        NODE_DISPLAY_NAME_MAPPINGS = {"StubPerturb": "Stub Perturb"}
    '''))
    (pack / "__init__.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass

        from comfy_api.latest import ComfyExtension, io

        from . import v1_nodes


        def v3_schema_stub(module):
            names = getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", {})

            @dataclass
            class SchemaStub:
                node_id: str
                display_name: str | None

            def inject(cls, node_id, display_name=None):
                schema = SchemaStub(node_id, display_name)
                if not hasattr(cls, "GET_SCHEMA"):
                    setattr(cls, "GET_SCHEMA", lambda: schema)
                return cls

            return [inject(c, n, names.get(n)) for n, c in module.NODE_CLASS_MAPPINGS.items()]


        class StubV3(io.ComfyNode):
            @classmethod
            def define_schema(cls):
                return io.Schema(node_id="StubV3", outputs=[io.Int.Output()])

            @classmethod
            def execute(cls):
                return io.NodeOutput(1)


        class Extension(ComfyExtension):
            async def get_node_list(self):
                return [StubV3, *v3_schema_stub(v1_nodes)]


        async def comfy_entrypoint():
            return Extension()
    '''))
    (result,) = session.load_packs([tmp_path / "custom_nodes"])
    assert result.ok, result.error
    assert session.v3_nodes["stubbed_pack"] == ["StubV3", "StubPerturb"]
    assert "stubbed_pack" not in session.v3_errors
    spec = session.registry.get("StubPerturb")
    assert spec.origin == "v1" and spec.display_name == "Stub Perturb"
    assert spec.python_module == "custom_nodes.stubbed_pack"
