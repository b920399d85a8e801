"""SaveImageAdvanced (ComfyUI's nodes_images.py, 2026): PNG at 8 or 16 bits, scene-linear EXR
and AVIF (still or animated), with the prompt and workflow embedded, chosen through the `format`
dynamic combo (and AVIF's nested `save_mode`) as the editor sends it."""
from __future__ import annotations

import io
import json
import struct

import av
import numpy as np
import pytest
import torch

from nodes import _image_formats as formats
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def save(fmt: str, **options) -> dict:
    return node("SaveImageAdvanced", images=["img", 0], filename_prefix="adv/shot", format=fmt,
                **{f"format.{k}": v for k, v in options.items()})


def image(batch: int = 2, width: int = 8) -> dict:
    return node("EmptyImage", width=width, height=6, batch_size=batch, color=0x336699)


async def test_png_8_bit_with_metadata(runner, tmp_path):
    out = await runner.run({"img": image(), "s": save("png", bit_depth="8-bit", input_color_space="sRGB")})
    assert out.status == "success", out.error
    records = out.ui_outputs["s"]["images"]
    assert [r["filename"] for r in records] == ["shot_00001.png", "shot_00002.png"]
    assert all(r["subfolder"] == "adv" and r["type"] == "output" for r in records)
    data = (tmp_path / "output" / "adv" / "shot_00001.png").read_bytes()
    assert data[24] == 8  # IHDR bit depth
    text = formats.png_text(data)
    assert json.loads(text["prompt"])["s"]["class_type"] == "SaveImageAdvanced" and json.loads(text["workflow"]) == {}
    from PIL import Image
    pixels = np.array(Image.open(io.BytesIO(data)))
    assert pixels.shape == (6, 8, 3) and pixels[0, 0].tolist() == [0x33, 0x66, 0x99]


async def test_png_16_bit(runner, tmp_path):
    out = await runner.run({"img": image(1), "s": save("png", bit_depth="16-bit", input_color_space="sRGB")})
    assert out.status == "success", out.error
    data = (tmp_path / "output" / "adv" / "shot_00001.png").read_bytes()
    assert data[24] == 16
    frame = next(av.open(io.BytesIO(data)).decode(video=0))
    pixels = frame.to_ndarray(format="rgb48le")
    assert pixels[0, 0].tolist() == [int(0x33 / 255 * 65535), int(0x66 / 255 * 65535), int(0x99 / 255 * 65535)]


@pytest.mark.parametrize("space, expect", [("linear", 0.4), ("sRGB", ((0.4 + 0.055) / 1.055) ** 2.4),
                                           ("HDR", 0.4 * 0.4 / 3)])
def test_exr_is_scene_linear_with_chromaticities_and_metadata(space, expect):
    picture = torch.full((3, 4, 3), 0.4)
    data = formats.exr_with_metadata(formats.encode_still(picture, "exr", "32-bit float", space),
                                     {"1": {"class_type": "X"}}, {"workflow": {"nodes": []}}, space)
    attributes, _ = formats.exr_attributes(data)
    assert json.loads(attributes["prompt"][1]) == {"1": {"class_type": "X"}}
    assert json.loads(attributes["workflow"][1]) == {"nodes": []}
    red_x = struct.unpack("<8f", attributes["chromaticities"][1])[0]
    assert red_x == pytest.approx(0.708 if space == "HDR" else 0.64)
    decoded = next(av.open(io.BytesIO(data)).decode(video=0)).to_ndarray(format="gbrpf32le")  # [H, W, 3]
    assert decoded.shape == (3, 4, 3) and np.allclose(decoded, expect, atol=1e-6)


async def test_exr_in_a_prompt_and_disable_metadata(runner, tmp_path):
    runner.env.disable_metadata = True
    out = await runner.run({"img": image(1), "s": save("exr", bit_depth="32-bit float", input_color_space="linear")})
    assert out.status == "success", out.error
    attributes, _ = formats.exr_attributes((tmp_path / "output" / "adv" / "shot_00001.exr").read_bytes())
    assert "prompt" not in attributes and "chromaticities" not in attributes


async def test_avif_still_and_animated(runner, tmp_path):
    still = save("avif", bit_depth="auto", input_color_space="sRGB", crf=30, **{"save_mode": "still images"})
    out = await runner.run({"img": image(2, width=32), "s": still})
    assert out.status == "success", out.error
    assert [r["filename"] for r in out.ui_outputs["s"]["images"]] == ["shot_00001.avif", "shot_00002.avif"]
    animated = save("avif", bit_depth="10-bit YUV420", input_color_space="HDR", crf=30,
                    **{"save_mode": "animated", "save_mode.fps": 4.0, "save_mode.loop_count": 0})
    out = await runner.run({"img": image(3, width=32), "s": animated}, prompt_id="p2")
    assert out.status == "success", out.error
    assert len(out.ui_outputs["s"]["images"]) == 1 and out.ui_outputs["s"]["animated"] == [True]
    path = tmp_path / "output" / "adv" / out.ui_outputs["s"]["images"][0]["filename"]
    with av.open(str(path)) as container:  # a still item (the first frame) and the sequence track
        track = max(container.streams.video, key=lambda stream: stream.frames)
        frames = list(container.decode(track))
    assert len(frames) == 3 and frames[0].format.name.startswith("yuv420p10")
    assert path.name == "shot_00003.avif"  # after the two stills: nothing is overwritten


async def test_later_runs_count_on_and_never_overwrite(runner, tmp_path):
    for prompt_id, color in (("a", 0), ("b", 255)):  # a changed image: the saver runs again
        img = node("EmptyImage", width=8, height=6, batch_size=1, color=color)
        out = await runner.run({"img": img, "s": save("png", bit_depth="8-bit", input_color_space="sRGB")},
                               prompt_id=prompt_id)
        assert out.status == "success", out.error
    assert sorted(p.name for p in (tmp_path / "output" / "adv").iterdir()) == ["shot_00001.png", "shot_00002.png"]


async def test_a_wrong_option_for_the_format_is_an_error(runner):
    out = await runner.run({"img": image(1), "s": save("png", bit_depth="32-bit float", input_color_space="sRGB")})
    assert out.status == "error" and "bit_depth" in str(out.error)


def test_rgba_and_grey_images_and_avif_refuses_alpha(tmp_path):
    for channels in (1, 4):
        data = formats.encode_still(torch.rand(4, 4, channels), "png", "8-bit", "sRGB")
        assert data.startswith(formats.PNG_SIGNATURE)
    with pytest.raises(formats.EncodeError, match="AVIF"):
        formats.write_avif(torch.rand(1, 8, 32, 4), str(tmp_path / "x.avif"), "auto", "sRGB", 30)


async def test_avif_refuses_images_narrower_than_svt_av1_takes_before_writing(runner, tmp_path):
    # SVT-AV1 corrupts the process's heap on frames narrower than 25 px (comfy_core/video/encode.py)
    still = save("avif", bit_depth="auto", input_color_space="sRGB", crf=30, **{"save_mode": "still images"})
    out = await runner.run({"img": image(1, width=24), "s": still})
    assert out.status == "error" and "at least 32 pixels wide; these are 24" in str(out.error)
    assert not list((tmp_path / "output").rglob("*.avif"))
