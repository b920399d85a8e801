"""ImageCompare (ComfyUI's nodes_image_compare.py, 2026): an output node writing both images to
the temp folder as previews, listed as `a_images` and `b_images` for the editor's slider."""
from __future__ import annotations

from tests.nodes.workflow_2026 import Runner, node


async def test_both_images_are_previewed(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"a": node("EmptyImage", width=8, height=6, batch_size=2, color=0xFF0000),
              "b": node("EmptyImage", width=8, height=6, batch_size=1, color=0x0000FF),
              "c": node("ImageCompare", image_a=["a", 0], image_b=["b", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    ui = out.ui_outputs["c"]
    assert len(ui["a_images"]) == 2 and len(ui["b_images"]) == 1
    for entry in ui["a_images"] + ui["b_images"]:
        assert entry["type"] == "temp" and entry["filename"].startswith("comfy.compare.")
        assert (runner.env.temp_dir / entry["subfolder"] / entry["filename"]).is_file()


async def test_one_image_or_none(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"b": node("EmptyImage", width=8, height=6, batch_size=1, color=0),
              "c": node("ImageCompare", image_b=["b", 0], compare_view={})}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["c"]["a_images"] == [] and len(out.ui_outputs["c"]["b_images"]) == 1
