"""ComfyUI's `node_helpers` (compat/helpers.py): `image_alpha_fix` exactly as ComfyUI's (it pads
the destination with one channel of 1.0, or cuts the source to the destination's channels) and
`hasher` following `--default-hashing-function`."""
from __future__ import annotations

import hashlib

import pytest
import torch


def test_image_alpha_fix_matches_comfyuis_rule(session):
    import node_helpers

    rgb = torch.rand(1, 2, 2, 3)
    rgba = torch.rand(1, 2, 2, 4)
    dest, src = node_helpers.image_alpha_fix(rgb, rgba)
    assert dest is rgb and torch.equal(src, rgba[..., :3])
    dest, src = node_helpers.image_alpha_fix(rgba, rgb)
    assert src is rgb and dest.shape == (1, 2, 2, 5)
    assert torch.equal(dest[..., :4], rgba) and torch.all(dest[..., 4] == 1.0)
    same_a, same_b = node_helpers.image_alpha_fix(rgb, rgb)
    assert same_a is rgb and same_b is rgb


def test_hasher_follows_the_servers_hashing_flag(session):
    import node_helpers

    assert node_helpers.hasher() is hashlib.sha256  # no flags given: ComfyUI's default
    session.comfy_args = {"default_hashing_function": "md5"}
    assert node_helpers.hasher() is hashlib.md5
    session.comfy_args = {"default_hashing_function": "crc"}
    with pytest.raises(ValueError, match="default-hashing-function"):
        node_helpers.hasher()
