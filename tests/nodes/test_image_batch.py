"""RepeatImageBatch, ImageFromBatch, ImageAddNoise, GetImageSize: ComfyUI's semantics (seeded
noise from ComfyUI's stream, progress text frame), and typed errors."""
from __future__ import annotations

import struct

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes.errors import NodeInputError
from nodes.image_batch import get_image_size, image_add_noise, image_from_batch, repeat_image_batch


def _ramp(batch: int, height: int = 3, width: int = 4) -> torch.Tensor:
    return torch.linspace(0, 1, batch * height * width * 3).reshape(batch, height, width, 3)


def test_repeat_copies_the_whole_batch():
    image = _ramp(2)
    assert torch.equal(repeat_image_batch(image, 3)[0], torch.cat([image, image, image]))
    with pytest.raises(NodeInputError):
        repeat_image_batch(image, 0)


@pytest.mark.parametrize("index, length, picked", [(1, 2, [1, 2]), (2, 9, [2, 3]), (9, 2, [3]), (0, 1, [0])])
def test_from_batch_clamps_to_the_batch(index, length, picked):
    image = _ramp(4)
    out = image_from_batch(image, index, length)[0]
    assert torch.equal(out, image[picked])
    out += 1  # a copy: the input stays as it was
    assert torch.equal(image, _ramp(4))


def test_add_noise_uses_comfyuis_seeded_stream_and_clips():
    image = _ramp(2)
    torch.manual_seed(12345)
    noise = torch.randn(image.shape)  # ComfyUI: torch.manual_seed(seed) then randn on the CPU
    expected = torch.clip(image + 0.3 * noise, 0.0, 1.0)
    assert torch.equal(image_add_noise(image, 12345, 0.3)[0], expected)


def test_add_noise_leaves_the_global_generator_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    image_add_noise(_ramp(1), 0xFFFFFFFFFFFFFFFF, 0.5)
    assert torch.equal(torch.get_rng_state(), before)


def test_add_noise_strength_zero_is_the_image():
    assert torch.equal(image_add_noise(_ramp(1), 3, 0.0)[0], _ramp(1))
    with pytest.raises(NodeInputError) as info:
        image_add_noise(_ramp(1), -1, 0.5)
    assert info.value.input_name == "seed"


def test_get_image_size_returns_width_height_batch_and_shows_them():
    sent = []
    token = set_current(NodeContext("p", "7", "7", None, None, send=lambda kind, data: sent.append((kind, data))))
    try:
        assert get_image_size(_ramp(2, 5, 9), unique_id="7") == (9, 5, 2)
    finally:
        reset_current(token)
    text = "width: 9, height: 5\n batch size: 2"
    assert sent == [(3, struct.pack(">I", 1) + b"7" + text.encode())]


def test_get_image_size_outside_a_prompt_sends_nothing():
    assert get_image_size(_ramp(1)) == (4, 3, 1)
    with pytest.raises(NodeInputError) as info:
        get_image_size(torch.zeros(3, 4))
    assert info.value.input_name == "image"
