"""`nodes.SaveImage` / `nodes.PreviewImage` as packs subclass them: the instance attributes set in
`__init__` (`output_dir`, `type`, `prefix_append`, `compress_level`) say where and how the PNGs
are written, as in ComfyUI's nodes.py; `--disable-metadata` drops the text chunks."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from PIL import Image

from graph.executor import Executor
from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.graph.helpers import node, run_prompt

PACKS = Path(__file__).parent / "packs"
WORKFLOW = {"nodes": [], "links": []}


def zlib_level_bits(path: Path) -> int:
    """FLEVEL of the first IDAT's zlib header: 0 for level 1, 1 for levels 2-5, 3 for 7-9."""
    data = path.read_bytes()
    start = data.index(b"IDAT") + 4
    return data[start + 1] >> 6


@pytest.fixture
def pack_session(tmp_path):
    import compat

    env = Environment.rooted_at(tmp_path / "base")
    env.ensure_dirs()
    registry = Registry()
    register_builtin_nodes(registry)
    session = compat.install(env, registry)
    with session.activate():
        [result] = session.load_packs([PACKS])
        assert result.ok, result.error
        yield session


def _executor(session) -> Executor:
    return Executor(session.registry, env=session.env, before_node_call=[session.before_node_call])


def _prompt(**savers: dict) -> dict:
    prompt = {"1": node("EmptyImage", width=8, height=4, batch_size=1, color=0x336699)}
    for node_id, saver in savers.items():
        prompt[node_id] = saver
    return prompt


async def test_pack_subclasses_write_where_their_attributes_say(pack_session):
    env = pack_session.env
    prompt = _prompt(**{"2": node("PackPreview", images=["1", 0]),
                        "3": node("PackSubfolderSave", images=["1", 0], filename_prefix="shot"),
                        "4": node("PackPlainPreview", images=["1", 0])})
    outcome = await run_prompt(_executor(pack_session), prompt, extra_data={"extra_pnginfo": {"workflow": WORKFLOW}})
    assert outcome.status == "success"

    [preview] = outcome.ui_outputs["2"]["images"]
    assert preview["type"] == "temp" and preview["subfolder"] == ""
    assert re.fullmatch(r"ComfyUI_temp_[a-z]{5}_00001_\.png", preview["filename"])
    assert (env.temp_dir / preview["filename"]).is_file()
    assert zlib_level_bits(env.temp_dir / preview["filename"]) == 0  # compress_level 1

    [saved] = outcome.ui_outputs["3"]["images"]
    assert saved == {"filename": "shot_pack_00001_.png", "subfolder": "", "type": "output"}
    written = env.output_dir / "pack_saves" / "shot_pack_00001_.png"
    assert zlib_level_bits(written) == 3  # compress_level 9
    with Image.open(written) as img:
        assert set(img.text) == {"prompt", "workflow"}

    [inherited] = outcome.ui_outputs["4"]["images"]
    assert inherited["type"] == "temp" and inherited["filename"].startswith("ComfyUI_temp_")
    assert (env.temp_dir / inherited["filename"]).is_file()
    assert sorted(p.name for p in env.output_dir.iterdir()) == ["pack_saves"]  # nothing else in output/


def test_the_facades_are_comfyuis_classes(pack_session):
    import nodes

    assert issubclass(nodes.PreviewImage, nodes.SaveImage)
    saver, previewer = nodes.SaveImage(), nodes.PreviewImage()
    assert (saver.output_dir, saver.type, saver.prefix_append, saver.compress_level) == (
        str(pack_session.env.output_dir), "output", "", 4)
    assert (previewer.output_dir, previewer.type, previewer.compress_level) == (str(pack_session.env.temp_dir), "temp", 1)
    assert re.fullmatch(r"_temp_[a-z]{5}", previewer.prefix_append)
    images = torch.rand(2, 4, 6, 3)
    out = saver.save_images(images, "direct")
    assert [r["filename"] for r in out["ui"]["images"]] == ["direct_00001_.png", "direct_00002_.png"]
    shown = previewer.save_images(images)  # ComfyUI's signature: filename_prefix defaults to "ComfyUI"
    assert all(r["type"] == "temp" and r["filename"].startswith("ComfyUI_temp_") for r in shown["ui"]["images"])


async def test_disable_metadata_drops_the_text_chunks(pack_session):
    env = pack_session.env
    env.disable_metadata = True  # what the host sets for --disable-metadata
    prompt = _prompt(**{"2": node("SaveImage", images=["1", 0], filename_prefix="plain"),
                        "3": node("PackSubfolderSave", images=["1", 0], filename_prefix="pack")})
    outcome = await run_prompt(_executor(pack_session), prompt, extra_data={"extra_pnginfo": {"workflow": WORKFLOW}})
    assert outcome.status == "success"
    for path in (env.output_dir / "plain_00001_.png", env.output_dir / "pack_saves" / "pack_pack_00001_.png"):
        with Image.open(path) as img:
            assert img.text == {}


def test_disable_metadata_on_the_builtin_node(tmp_path):
    from graph.context import NodeContext, reset_current, set_current
    from nodes import image as image_nodes

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    env.disable_metadata = True
    token = set_current(NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env))
    try:
        image_nodes.save_image(torch.rand(1, 4, 4, 3), "x", prompt={"1": {}}, extra_pnginfo={"workflow": WORKFLOW})
        image_nodes.preview_image(torch.rand(1, 4, 4, 3), prompt={"1": {}}, extra_pnginfo={"workflow": WORKFLOW})
    finally:
        reset_current(token)
    for path in [env.output_dir / "x_00001_.png", *env.temp_dir.iterdir()]:
        with Image.open(path) as img:
            assert img.text == {}
