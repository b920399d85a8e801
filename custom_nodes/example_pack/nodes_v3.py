"""The V3 node of the example pack, registered through `comfy_entrypoint()`."""
from comfy_api.latest import ComfyExtension, io, ui


class ExampleImageStats(io.ComfyNode):
    """Mean brightness of an image batch, shown as text in the editor and returned as a FLOAT."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ExampleImageStats",
            display_name="Image Stats (example, V3)",
            category="example_pack",
            description="Reports the mean pixel value of an image batch.",
            inputs=[io.Image.Input("image"),
                    io.Combo.Input("channel", options=["all", "red", "green", "blue"], default="all")],
            outputs=[io.Float.Output(display_name="mean")],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, image, channel):
        index = {"red": 0, "green": 1, "blue": 2}.get(channel)
        pixels = image if index is None else image[..., index]
        mean = float(pixels.mean())
        return io.NodeOutput(mean, ui=ui.PreviewText(f"{channel}: {mean:.4f}"))


class ExampleExtension(ComfyExtension):
    async def get_node_list(self):
        return [ExampleImageStats]


async def comfy_entrypoint():
    return ExampleExtension()
