"""SaveAnimatedWEBP, SaveAnimatedPNG, SaveSVGNode: the files (frames, timing, pixels), ComfyUI's
metadata in each format and its absence under --disable-metadata, file naming and UI records."""
from __future__ import annotations

import io
import json
import struct
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence

from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.save_formats import SVG, save_animated_png, save_animated_webp, save_svg

PROMPT = {"3": {"class_type": "KSampler", "inputs": {"seed": 1}}}
EXTRA = {"workflow": {"nodes": [{"id": 3}]}, "note": "hi"}


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path / "base")
    environment.ensure_dirs()
    return environment


@contextmanager
def running_in(env: Environment):
    token = set_current(NodeContext("p", "1", "1", None, env))
    try:
        yield
    finally:
        reset_current(token)


def _frames(batch: int = 3, height: int = 5, width: int = 6) -> torch.Tensor:
    return torch.rand(batch, height, width, 3, generator=torch.Generator().manual_seed(0))


def _uint8(image: torch.Tensor) -> np.ndarray:
    return np.clip(255.0 * image.numpy(), 0, 255).astype(np.uint8)


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, body) of every chunk, read by hand from the PNG layout."""
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body)
        chunks.append((kind, body))
        pos += 12 + length
    return chunks


# --- SaveAnimatedWEBP ----------------------------------------------------------------------------

def test_webp_holds_every_frame_losslessly_at_the_frame_rate(env):
    images = _frames()
    with running_in(env):
        out = save_animated_webp(images, "anim/clip", 6.5, True, 80, "default", prompt=PROMPT, extra_pnginfo=EXTRA)
    assert out["ui"] == {"images": [{"filename": "clip_00001_.webp", "subfolder": "anim", "type": "output"}],
                         "animated": (True,)}
    with Image.open(env.output_dir / "anim" / "clip_00001_.webp") as img:
        assert img.n_frames == 3
        for index, frame in enumerate(ImageSequence.Iterator(img)):
            assert np.array_equal(np.array(frame.convert("RGB")), _uint8(images[index]))
            assert frame.info["duration"] == int(1000 / 6.5)  # known once the frame is decoded


def test_webp_metadata_is_comfyuis_exif_tags(env):
    with running_in(env):
        save_animated_webp(_frames(2), "m", 6.0, True, 80, "fastest", prompt=PROMPT, extra_pnginfo=EXTRA)
    with Image.open(env.output_dir / "m_00001_.webp") as img:
        exif = Image.Exif()
        exif.load(img.info["exif"])
    assert exif[0x0110] == "prompt:" + json.dumps(PROMPT)
    assert exif[0x010F] == "workflow:" + json.dumps(EXTRA["workflow"])
    assert exif[0x010E] == "note:" + json.dumps("hi")


def test_webp_without_metadata_and_a_single_image(env):
    env.disable_metadata = True
    with running_in(env):
        first = save_animated_webp(_frames(1), "m", 6.0, False, 50, "slowest", prompt=PROMPT, extra_pnginfo=EXTRA)
        second = save_animated_webp(_frames(1), "m", 6.0, False, 50, "slowest")
    assert first["ui"]["animated"] == (False,)
    assert second["ui"]["images"][0]["filename"] == "m_00002_.webp"
    with Image.open(env.output_dir / "m_00001_.webp") as img:
        exif = Image.Exif()
        exif.load(img.info.get("exif", b""))
        assert dict(exif) == {}


@pytest.mark.parametrize("kwargs, name", [({"fps": 0.0}, "fps"), ({"method": "best"}, "method"),
                                          ({"quality": 101}, "quality"), ({"images": torch.zeros(2, 2)}, "images")])
def test_webp_refuses_bad_inputs(env, kwargs, name):
    args = {"images": _frames(1), "filename_prefix": "x", "fps": 6.0, "lossless": True, "quality": 80,
            "method": "default", **kwargs}
    with running_in(env), pytest.raises(NodeInputError) as info:
        save_animated_webp(**args)
    assert info.value.input_name == name


def test_prefix_may_not_leave_the_output_folder(env):
    with running_in(env), pytest.raises(ValueError, match="filename_prefix"):
        save_animated_webp(_frames(1), "../escape", 6.0, True, 80, "default")


# --- SaveAnimatedPNG -----------------------------------------------------------------------------

def test_apng_frames_timing_and_comf_chunks_after_the_image_data(env):
    images = _frames()
    with running_in(env):
        out = save_animated_png(images, "p", 4.0, 5, prompt=PROMPT, extra_pnginfo=EXTRA)
    assert out["ui"] == {"images": [{"filename": "p_00001_.png", "subfolder": "", "type": "output"}],
                         "animated": (True,)}
    path = env.output_dir / "p_00001_.png"
    with Image.open(path) as img:
        assert img.n_frames == 3
        for index, frame in enumerate(ImageSequence.Iterator(img)):
            assert frame.info["duration"] == 250
            assert np.array_equal(np.array(frame.convert("RGB")), _uint8(images[index]))
    chunks = _png_chunks(path.read_bytes())
    kinds = [kind for kind, _ in chunks]
    comf = [body for kind, body in chunks if kind == b"comf"]
    assert comf == [b"prompt\0" + json.dumps(PROMPT).encode(), b"workflow\0" + json.dumps(EXTRA["workflow"]).encode(),
                    b"note\0" + json.dumps("hi").encode()]
    assert kinds.index(b"comf") > kinds.index(b"IDAT") and b"tEXt" not in kinds


def test_apng_without_metadata_has_no_comf_chunks(env):
    env.disable_metadata = True
    with running_in(env):
        save_animated_png(_frames(1), "p", 12.0, 0, prompt=PROMPT, extra_pnginfo=EXTRA)
    assert all(kind != b"comf" for kind, _ in _png_chunks((env.output_dir / "p_00001_.png").read_bytes()))


def test_apng_refuses_a_compress_level_out_of_range(env):
    with running_in(env), pytest.raises(NodeInputError) as info:
        save_animated_png(_frames(1), "p", 6.0, 10)
    assert info.value.input_name == "compress_level"


# --- SaveSVGNode ---------------------------------------------------------------------------------

def _svg() -> SVG:
    return SVG([io.BytesIO(b'<svg width="1"><rect/></svg>'), io.BytesIO('<svg a="b">é</svg>'.encode())])


def test_svg_files_get_the_metadata_after_the_svg_tag(env):
    with running_in(env):
        out = save_svg(_svg(), "svg/s_%batch_num%", prompt=PROMPT, extra_pnginfo=EXTRA)
    assert out["ui"] == {"images": [{"filename": "s_0_00001_.svg", "subfolder": "svg", "type": "output"},
                                    {"filename": "s_1_00002_.svg", "subfolder": "svg", "type": "output"}]}
    text = (env.output_dir / "svg" / "s_0_00001_.svg").read_text(encoding="utf-8")
    head, rest = text.split("\n", 1)
    assert head == '<svg width="1">'
    assert rest.lstrip().startswith("<metadata>") and rest.endswith("<rect/></svg>")
    cdata = rest[rest.index("<![CDATA[") + 9:rest.index("]]>")]
    assert json.loads(cdata) == {"prompt": PROMPT, **EXTRA}
    assert (env.output_dir / "svg" / "s_1_00002_.svg").read_text(encoding="utf-8").endswith("é</svg>")


def test_svg_without_prompt_or_with_disabled_metadata_is_written_as_given(env):
    with running_in(env):
        save_svg(_svg(), "plain")
        env.disable_metadata = True
        save_svg(_svg(), "off", prompt=PROMPT, extra_pnginfo=EXTRA)
    assert (env.output_dir / "plain_00001_.svg").read_bytes() == b'<svg width="1"><rect/></svg>'
    assert (env.output_dir / "off_00001_.svg").read_bytes() == b'<svg width="1"><rect/></svg>'


def test_svg_combines_and_refuses_what_is_not_an_svg(env):
    assert len(SVG.combine_all([_svg(), _svg().combine(_svg())]).data) == 6
    with running_in(env), pytest.raises(NodeInputError) as info:
        save_svg("<svg/>", "x")
    assert info.value.input_name == "svg"
