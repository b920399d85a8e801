"""Wan22FunControlToVideo's `start_image`, an argument of today's ComfyUI's execute
(comfy_extras/nodes_wan.py@ee54641d137d: no socket, packs pass it): the start frames encoded into the
second half of `concat_latent_image`, and the first `frames + 3` pixel-frame mask slots zero."""
from __future__ import annotations

import torch

from comfy_core.families.wan.latent_format import wan22_latent_format
from nodes import wan_nodes
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def test_start_image_fills_the_start_part_and_marks_its_frames_known():
    fmt = wan22_latent_format()
    vae = FakeVideoVAE(channels=48, downscale=16)
    start, control = frames(2, 32, 64, seed=3), frames(9, 32, 64, seed=4)
    pos, neg, latent = wan_nodes.wan22_fun_control_to_video(cond(), cond(2.0), vae, 64, 32, 9, 1,
                                                            control_video=control, start_image=start)
    values = pos[0][1]
    concat, mask = values["concat_latent_image"], values["concat_mask"]
    assert concat.shape == (1, 96, 3, 2, 4) and latent["samples"].shape == (1, 48, 3, 2, 4)
    # independent: the start frames' own latent (2 frames -> 1 latent frame) in the start part ...
    assert torch.allclose(concat[:, 48:, :1], vae.latent_of(start)[:, :, :1])
    assert torch.allclose(concat[:, 48:, 1:], fmt.process_out(torch.zeros(1, 48, 2, 2, 4)))
    assert torch.allclose(concat[:, :48], vae.latent_of(control))  # ... the control part as before
    # mask over 12 pixel-frame slots [1, 1, 12, h, w], slots 0..start+2 zero, as [1, 4, 3, h, w]
    slots = torch.ones(1, 1, 12, 2, 4)
    slots[:, :, :2 + 3] = 0.0
    assert torch.equal(mask, slots.view(1, 3, 4, 2, 4).transpose(1, 2))
    assert neg[0][1]["concat_mask"] is mask


def test_without_start_image_nothing_is_known():
    vae = FakeVideoVAE(channels=48, downscale=16)
    plain = wan_nodes.wan22_fun_control_to_video(cond(), cond(), vae, 64, 32, 5, 1)[0][0][1]["concat_mask"]
    assert torch.equal(plain, torch.ones(1, 4, 2, 2, 4))
