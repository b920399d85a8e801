"""A fixture pack in ComfyUI's V3 style (comfy_api), registered through comfy_entrypoint()."""
import asyncio

from comfy_api.latest import ComfyAPI, ComfyAPISync, ComfyExtension
from comfy_api.v0_0_1 import io as io_v1
from comfy_api.v0_0_2 import io, ui
from comfy_execution.graph_utils import GraphBuilder


class V3Scale(io.ComfyNode):
    calls = 0

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="V3Scale", display_name="V3 Scale", category="compat/v3",
            inputs=[io.Int.Input("value", default=1, min=-100, max=100),
                    io.Float.Input("factor", default=2.0, min=0.0, max=10.0, display_mode=io.NumberDisplay.slider),
                    io.Combo.Input("mode", options=["mul", "add"], default="mul")],
            outputs=[io.Int.Output(display_name="scaled")],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def validate_inputs(cls, factor):
        return True if factor != 3.0 else "factor 3 is not allowed"

    @classmethod
    def execute(cls, value, factor, mode):
        V3Scale.calls += 1
        result = int(value * factor) if mode == "mul" else int(value + factor)
        return io.NodeOutput(result, ui=ui.PreviewText(f"{cls.hidden.unique_id}:{result}"))


class V3AsyncProgress(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3AsyncProgress", category="compat/v3",
                         inputs=[io.Int.Input("value", force_input=True)],
                         outputs=[io.Int.Output()])

    @classmethod
    async def execute(cls, value):
        api = ComfyAPI()
        await api.execution.set_progress(1, 2)
        await asyncio.sleep(0)
        ComfyAPISync().execution.set_progress(2, 2)
        return io.NodeOutput(value + 1)


class V3Choose(io.ComfyNode):
    """Lazy inputs: only the chosen branch is evaluated."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3Choose", category="compat/v3",
                         inputs=[io.Boolean.Input("first", default=True),
                                 io.Int.Input("a", lazy=True, force_input=True),
                                 io.Int.Input("b", lazy=True, force_input=True)],
                         outputs=[io.Int.Output()])

    @classmethod
    def check_lazy_status(cls, first, a=None, b=None):
        wanted = "a" if first else "b"
        return [wanted] if (a if first else b) is None else []

    @classmethod
    def execute(cls, first, a=None, b=None):
        return io.NodeOutput(a if first else b)


class V3Block(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3Block", category="compat/v3",
                         inputs=[io.Int.Input("value", force_input=True), io.Boolean.Input("block", default=False)],
                         outputs=[io.Int.Output()])

    @classmethod
    def execute(cls, value, block):
        return io.NodeOutput(block_execution="blocked by V3Block") if block else io.NodeOutput(value)


class V3Double(io.ComfyNode):
    """Expands into two V3Scale nodes through GraphBuilder."""

    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3Double", category="compat/v3", enable_expand=True,
                         inputs=[io.Int.Input("value", force_input=True)], outputs=[io.Int.Output()])

    @classmethod
    def execute(cls, value):
        graph = GraphBuilder()
        first = graph.node("V3Scale", value=value, factor=2.0, mode="mul")
        second = graph.node("V3Scale", value=first.out(0), factor=1.0, mode="add")
        return io.NodeOutput(second.out(0), expand=graph.finalize())


class V3Show(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3Show", category="compat/v3", is_output_node=True,
                         inputs=[io_v1.Custom("*").Input("value")], outputs=[])

    @classmethod
    def execute(cls, value):
        return io.NodeOutput(ui=ui.PreviewText(str(value)))


class CompatV3Extension(ComfyExtension):
    async def on_load(self):
        self.loaded = True

    async def get_node_list(self):
        return [V3Scale, V3AsyncProgress, V3Choose, V3Block, V3Double, V3Show]


async def comfy_entrypoint():
    return CompatV3Extension()
