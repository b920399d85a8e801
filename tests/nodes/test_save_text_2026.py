"""SaveText (today's ComfyUI, comfy_extras/nodes_text.py): text written to the output folder as
`<prefix>_<counter:05>.<format>` with SaveImage's prefix rules, json pretty-printed when it parses,
the text passed on and shown."""
from __future__ import annotations

import json

import pytest

from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def save(text: str, prefix: str = "ComfyUI", fmt: str = "txt") -> dict:
    return {"t": node("PrimitiveStringMultiline", value=text),
            "save": node("SaveText", text=["t", 0], filename_prefix=prefix, format=fmt),
            "show": node("PreviewAny", source=["save", 0])}


async def test_writes_the_text_and_counts_up(runner):
    first = await runner.run(save("hello\nwörld"))
    assert first.status == "success", first.error
    assert first.ui_outputs["save"] == {"text": ["hello\nwörld"],
                                        "files": [{"filename": "ComfyUI_00001.txt", "subfolder": "", "type": "output"}]}
    assert first.ui_outputs["show"] == {"text": ["hello\nwörld"]}  # passed on unchanged
    assert (runner.env.output_dir / "ComfyUI_00001.txt").read_text(encoding="utf-8") == "hello\nwörld"
    second = await runner.run(save("again"))
    assert second.ui_outputs["save"]["files"][0]["filename"] == "ComfyUI_00002.txt"  # the first is kept
    assert (runner.env.output_dir / "ComfyUI_00001.txt").read_text(encoding="utf-8") == "hello\nwörld"


@pytest.mark.parametrize("fmt", ["md", "csv"])
async def test_other_formats_write_the_text_as_it_is(runner, fmt):
    out = await runner.run(save("a,b\n1,2", "notes/run", fmt))
    assert out.status == "success", out.error
    assert out.ui_outputs["save"]["files"] == [{"filename": f"run_00001.{fmt}", "subfolder": "notes", "type": "output"}]
    assert (runner.env.output_dir / "notes" / f"run_00001.{fmt}").read_text(encoding="utf-8") == "a,b\n1,2"


async def test_json_is_pretty_printed_when_it_parses(runner):
    out = await runner.run(save('{"b": [1, 2], "ü": "ö"}', fmt="json"))
    assert out.status == "success", out.error
    written = (runner.env.output_dir / "ComfyUI_00001.json").read_text(encoding="utf-8")
    assert written == json.dumps({"b": [1, 2], "ü": "ö"}, indent=2, ensure_ascii=False)
    await runner.run(save("not {json", fmt="json"))
    assert (runner.env.output_dir / "ComfyUI_00002.json").read_text(encoding="utf-8") == "not {json"


async def test_a_prefix_leading_out_of_the_output_folder_is_refused(runner):
    prompt = save("x", "../escape")
    checked = await runner.validate(prompt)
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs)
    assert out.status == "error" and "filename_prefix" in str(out.error)
    assert not (runner.env.output_dir.parent / "escape_00001.txt").exists()


async def test_an_unknown_format_is_refused_before_running(runner):
    checked = await runner.validate(save("x", fmt="pdf"))
    assert not checked.ok
