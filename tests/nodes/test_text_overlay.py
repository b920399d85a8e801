"""TextOverlay (ComfyUI's nodes_text_overlay.py, 2026; nodes/text_overlay.py): where the text lands
(margins, top/bottom, left/centre/right), its colour and outline, wrapping and shrinking to fit,
compositing over RGB and RGBA batches, and the fonts folder. Fonts: Pillow's built-in default
and, where the system has it, DejaVu Sans (Debian's fonts-dejavu-core) copied into the test's
fonts folder; nothing is downloaded."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.text_overlay import text_overlay, wrap_text
from tests.nodes.workflow_2026 import Runner, node

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
H, W = 200, 400
MARGIN = 2  # 1% of the shorter side


def draw(images: torch.Tensor, text: str = "Hello world", *, font: str = "", font_size: float = 10.0,
         color: str = "#ffffff", position: str = "top", align: str = "left", outline: bool = False) -> torch.Tensor:
    (out,) = text_overlay(images, text, font, font_size, color, position, align, outline)
    return out


def changed_box(before: torch.Tensor, after: torch.Tensor) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the pixels of the first frame that changed, inclusive."""
    ys, xs = torch.nonzero((after[0] - before[0]).abs().sum(-1) > 0, as_tuple=True)
    assert ys.numel() > 0, "nothing was drawn"
    return int(ys.min()), int(ys.max()), int(xs.min()), int(xs.max())


def black(batch: int = 1, channels: int = 3) -> torch.Tensor:
    return torch.zeros(batch, H, W, channels)


def test_blank_text_returns_the_images_themselves():
    images = torch.rand(2, 16, 16, 3)
    assert draw(images, "") is images and draw(images, "  \n ") is images


def test_the_text_is_drawn_in_its_colour_flush_with_the_top_left_margin():
    images = black()
    out = draw(images, color="#ff0000")
    top, bottom, left, _right = changed_box(images, out)
    assert top == MARGIN and left <= MARGIN + 4 and bottom < H // 4  # one line, 10% high
    assert out[..., 1:].abs().max() == 0 and out[..., 0].max() == 1.0  # only red; full red in the glyphs
    assert out.shape == images.shape and out.dtype == images.dtype


@pytest.mark.parametrize("align", ["left", "center", "right"])
def test_bottom_placement_and_alignment(align):
    images = black()
    top, bottom, left, right = changed_box(images, draw(images, position="bottom", align=align))
    assert H - MARGIN - 3 <= bottom <= H - MARGIN and top > H // 2
    if align == "left":
        assert left <= MARGIN + 4 and right < W // 2
    elif align == "right":
        assert right >= W - MARGIN - 4 and left > W // 2
    else:
        assert abs((left + right) / 2 - W / 2) <= 3


def test_the_outline_is_black_and_only_drawn_when_asked():
    white = torch.ones(1, H, W, 3)
    assert torch.allclose(draw(white, color="#ffffff", outline=False), white)  # white on white: no trace
    outlined = draw(white, color="#ffffff", outline=True)
    assert outlined.min() < 0.05  # the black stroke shows
    dark = outlined.sum(-1) < 0.1
    assert torch.equal(outlined[..., 0][dark], outlined[..., 2][dark])  # grey levels only: black over white


def test_every_frame_of_a_batch_gets_the_same_overlay():
    images = torch.rand(3, H, W, 3)
    out = draw(images, "Batch", color="#00ff00", align="center")
    alpha_like = [(out[i] - images[i]) for i in range(3)]
    changed = [torch.nonzero(d.abs().sum(-1) > 1e-6) for d in alpha_like]
    assert all(torch.equal(changed[0], c) for c in changed[1:])


def test_rgb_blend_is_alpha_over_the_image():
    grey = torch.full((1, H, W, 3), 0.5)
    out = draw(grey, color="#ffffff")
    # white text over grey: every pixel lies between the two, and the glyphs' cores are white
    assert out.min() >= 0.5 - 1e-6 and out.max() == pytest.approx(1.0)
    assert torch.allclose(out[..., 0], out[..., 1]) and torch.allclose(out[..., 1], out[..., 2])


def test_rgba_images_are_composited_source_over():
    clear = black(channels=4)
    out = draw(clear, color="#ff0000")
    alpha = out[..., 3]
    assert alpha.max() == 1.0 and alpha.min() == 0.0
    seen = alpha > 0
    # over a transparent frame the colour is the text's wherever it shows, however faint
    assert torch.allclose(out[..., 0][seen], torch.ones(int(seen.sum())), atol=1e-5)
    assert out[..., 1:3].abs().max() == 0 and out[..., :3][~seen].abs().max() == 0
    opaque = torch.cat([torch.full((1, H, W, 3), 0.25), torch.ones(1, H, W, 1)], dim=-1)
    over = draw(opaque, color="#ff0000")
    assert torch.allclose(over[..., 3], torch.ones(1, H, W))  # an opaque frame stays opaque
    assert torch.allclose(over[..., :3], draw(opaque[..., :3], color="#ff0000"), atol=1e-5)  # as the RGB blend


def test_a_semi_transparent_colour_blends_partly():
    images = black()
    full, half = draw(images, color="#ffffff"), draw(images, color="#ffffff80")
    assert half.max() == pytest.approx(128 / 255, abs=1e-6) and full.max() == 1.0


def test_wrap_breaks_on_spaces_and_cuts_long_words():
    width = lambda s: 10.0 * len(s)  # noqa: E731  ten pixels a character
    assert wrap_text("aaa bbb ccc", width, 70) == ["aaa bbb", "ccc"]
    assert wrap_text("abcdefghij", width, 30) == ["abc", "def", "ghi", "j"]
    assert wrap_text("ab abcdefg x", width, 30) == ["ab", "abc", "def", "g x"]
    assert wrap_text("one\n\ntwo", width, 100) == ["one", "", "two"]
    assert wrap_text("x  y", width, 100) == ["x y"]  # runs of spaces collapse


def test_long_text_wraps_onto_more_lines():
    images = black()
    one = changed_box(images, draw(images, "short"))
    many = changed_box(images, draw(images, "a long sentence that cannot possibly fit on one line of this image"))
    assert many[1] - many[0] > 2 * (one[1] - one[0]) and many[3] <= W - MARGIN


def test_escaped_newlines_break_lines():
    images = black()
    escaped = draw(images, "first\\nsecond")
    assert torch.equal(escaped, draw(images, "first\nsecond"))
    assert changed_box(images, escaped)[1] > changed_box(images, draw(images, "first second"))[1]


def test_text_too_tall_shrinks_to_fit_inside_the_margins():
    images = black()
    lines = "\n".join(f"line {i}" for i in range(12))
    top, bottom, _l, _r = changed_box(images, draw(images, lines, font_size=20.0, position="bottom"))
    assert top >= MARGIN and bottom <= H - MARGIN


@pytest.fixture
def font_env(tmp_path):
    if not DEJAVU.is_file():
        pytest.skip("DejaVu Sans is not installed (Debian's fonts-dejavu-core)")
    (tmp_path / "fonts").mkdir()
    shutil.copy(DEJAVU, tmp_path / "fonts" / "DejaVuSans.ttf")
    return tmp_path


async def test_text_overlay_in_a_prompt_with_a_folder_font(font_env):
    runner = Runner(font_env)
    prompt = {"img": node("EmptyImage", width=W, height=H, batch_size=1, color=0),
              "t": node("TextOverlay", images=["img", 0], text="Label", font="DejaVuSans.ttf", font_size=12.0,
                        color="#ffffff", position="top", align="left", outline=True),
              "p": node("PreviewImage", images=["t", 0])}
    info = runner.registry.object_info(runner.env)["TextOverlay"]
    assert info["input"]["required"]["font"][1]["options"] == ["DejaVuSans.ttf"]
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert "t" in runner.ran
    bad = dict(prompt, t=node("TextOverlay", **{**prompt["t"]["inputs"], "font": "Missing.ttf"}))
    assert not (await runner.validate(bad)).ok


def test_a_folder_font_draws_differently_from_the_default_and_shrinks(font_env, monkeypatch):
    env = Environment.rooted_at(font_env)
    monkeypatch.setattr("nodes.text_overlay.current_env", lambda: env)
    images = black()
    assert not torch.equal(draw(images, "Hello", font="DejaVuSans.ttf"), draw(images, "Hello"))
    lines = "\n".join(f"line {i}" for i in range(12))  # needs several shrinking steps
    top, bottom, _l, _r = changed_box(images, draw(images, lines, font="DejaVuSans.ttf", font_size=20.0))
    assert top >= MARGIN and bottom <= H - MARGIN
    with pytest.raises(NodeInputError, match="font"):
        draw(images, "Hello", font="Missing.ttf")


def test_bad_inputs_name_themselves():
    with pytest.raises(NodeInputError, match="color"):
        draw(black(), color="not a colour")
    with pytest.raises(NodeInputError, match="images"):
        draw(torch.zeros(H, W, 3))


async def test_in_a_prompt_the_font_must_be_a_file_of_the_fonts_folder(tmp_path):
    # As in ComfyUI, the combo lists the fonts folder: with none there, no value validates.
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=64, height=64, batch_size=1, color=0),
              "t": node("TextOverlay", images=["img", 0], text="Label", font="", font_size=12.0, color="#ffffff",
                        position="top", align="left", outline=True),
              "p": node("PreviewImage", images=["t", 0])}
    checked = await runner.validate(prompt)
    assert not checked.ok
    assert checked.node_errors["t"]["errors"][0]["type"] == "value_not_in_list"
