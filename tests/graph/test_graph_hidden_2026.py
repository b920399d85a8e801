"""The hidden inputs today's ComfyUI added: COMFY_USAGE_SOURCE (who submitted the prompt, from
`extra_data.comfy_usage_source`) and EXECUTION_LIST (the run's outputs, read through ComfyUI's
`get_cache(node_id, requester)`), for V1 classes and V3 schemas alike."""
from __future__ import annotations

from graph.executor import Executor
from graph.registry import Registry
from tests.graph.helpers import node, run_prompt


class Source:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 1})}}

    RETURN_TYPES = ("INT", "INT")
    FUNCTION = "run"
    CATEGORY = "testing"

    def run(self, value):
        return (value, value * 10)


class Reader:
    """Reports what its hidden inputs gave it (V1)."""

    seen: list = []

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {})},
                "hidden": {"source": "COMFY_USAGE_SOURCE", "execution_list": "EXECUTION_LIST",
                           "unique_id": "UNIQUE_ID"}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True
    CATEGORY = "testing"

    def run(self, value, source, execution_list, unique_id):
        upstream = execution_list.get_cache("1", unique_id)
        never_run = execution_list.get_cache("99", unique_id)
        Reader.seen.append((source, upstream.outputs, never_run))
        return {}


def registry() -> Registry:
    reg = Registry()
    reg.add_v1("Source", Source, python_module="custom_nodes.hidden_pack")
    reg.add_v1("Reader", Reader, python_module="custom_nodes.hidden_pack")
    return reg


async def test_v1_hidden_usage_source_and_execution_list():
    Reader.seen = []
    prompt = {"1": node("Source", value=4), "2": node("Reader", value=["1", 0])}
    await run_prompt(Executor(registry()), prompt, extra_data={"comfy_usage_source": "comfy-cli"})
    assert Reader.seen == [("comfy-cli", [[4], [40]], None)]
    # Without the field the value is None (ComfyUI's extra_data.get)
    await run_prompt(Executor(registry()), prompt, "p2")
    assert Reader.seen[-1][0] is None


async def test_v3_schema_names_the_new_hidden_members(tmp_path):
    import compat
    from compat.v3 import io
    from compat.v3.adapter import spec_from_v3
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    seen = []

    class V3Reader(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="V3Reader", category="testing", is_output_node=True,
                             inputs=[io.Int.Input("value")],
                             hidden=[io.Hidden.comfy_usage_source, io.Hidden.execution_list, io.Hidden.unique_id])

        @classmethod
        def execute(cls, value):
            entry = cls.hidden.execution_list.get_cache("1", cls.hidden.unique_id)
            seen.append((cls.hidden.comfy_usage_source, entry.outputs))
            return io.NodeOutput()

    assert io.Hidden.comfy_usage_source.value == "COMFY_USAGE_SOURCE"
    assert io.Hidden.execution_list.value == "EXECUTION_LIST"
    reg = registry()
    sess = compat.install(env, reg)
    with sess.activate():
        reg.add_spec(spec_from_v3(V3Reader, python_module="custom_nodes.hidden_pack"))
        await run_prompt(Executor(reg), {"1": node("Source", value=2), "2": node("V3Reader", value=["1", 1])},
                         extra_data={"comfy_usage_source": "comfyui-frontend"})
    assert seen == [("comfyui-frontend", [[2], [20]])]


def test_compat_get_input_data_reads_todays_execution_list_and_the_old_output_map():
    from compat.execution_api import get_input_data
    from graph.cache import CacheEntry

    class Entries:
        def get_cache(self, node_id, requester):
            assert requester == "2"
            return CacheEntry([[4], [40]]) if node_id == "1" else None

    execution_list = Entries()
    data, missing, _ = get_input_data({"value": ["1", 1], "other": ["7", 0]}, Reader, "2", execution_list,
                                      None, {"comfy_usage_source": "sdk"})
    assert data["value"] == [40] and missing == {"other": True}
    assert data["source"] == ["sdk"] and data["execution_list"] == [execution_list] and data["unique_id"] == ["2"]
    data, missing, _ = get_input_data({"value": ["1", 0]}, Reader, "2", {"1": [[4], [40]]})
    assert data["value"] == [4] and missing == {}
