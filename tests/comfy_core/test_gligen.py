"""GLIGEN: loading the file layout, the object tokens the fusers receive, the fusers as the UNet's
`middle_patch` (indexed by transformer_index), zero gates leaving the UNet unchanged, and
sampling with boxes (the negative gets the positive's boxes, as ComfyUI)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.gligen.load import load_gligen
from comfy_core.gligen.model import GligenError
from comfy_core.loading import load_checkpoint
from comfy_core.sampling.conditioning import convert_cond, prepare_conds
from tests.fixtures.checkpoints import write_tiny_checkpoint
from tests.fixtures.checkpoints_variants import transformer_widths, write_tiny_gligen


@pytest.fixture(scope="module")
def sd1(tmp_path_factory):
    root = tmp_path_factory.mktemp("gligen")
    model, clip, _ = load_checkpoint(write_tiny_checkpoint(root, "sd1"), output_vae=False)
    return model, clip, root


def test_one_fuser_per_spatial_transformer_in_unet_order(sd1):
    gligen = load_gligen(write_tiny_gligen(sd1[2], "sd1", seed=1))
    widths = [q for _block, q in transformer_widths("sd1")]
    assert [f.linear.out_features for f in gligen.model.module_list] == widths
    assert gligen.model.key_dim == 64 and gligen.model.position_net.linears[0].in_features == 64 + 64


def test_the_fusers_receive_the_position_net_tokens_of_the_boxes(sd1):
    gligen = load_gligen(write_tiny_gligen(sd1[2], "sd1", seed=2)).model
    g = torch.Generator().manual_seed(0)
    text = torch.randn(1, 64, generator=g)
    patch = gligen.set_position((2, 4, 8, 10), [(text, 4, 3, 1, 2)], "cpu")
    # Independently: box (x1, y1, x2, y2) = (2/10, 1/8, 5/10, 5/8), then 29 empty slots.
    boxes = torch.zeros(30, 4)
    boxes[0] = torch.tensor([2 / 10, 1 / 8, 5 / 10, 5 / 8])
    net = gligen.position_net
    freqs = [100 ** (k / 8) for k in range(8)]
    fourier = torch.cat([f(freq * boxes) for freq in freqs for f in (torch.sin, torch.cos)], dim=-1)  # [30, 64]
    texts = torch.cat([text, net.null_positive_feature.expand(29, 64)])
    fourier[1:] = net.null_position_feature
    expected = net.linears(torch.cat([texts, fourier], dim=-1))
    torch.testing.assert_close(patch.objs, expected.expand(2, 30, 64), rtol=1e-5, atol=1e-5)
    # The patch runs the fuser of the current transformer on those tokens.
    x = torch.randn(2, 80, 64, generator=g)
    fuser = gligen.module_list[3]
    visual = fuser.linear(patch.objs)
    h = x + math.tanh(float(fuser.alpha_attn)) * fuser.attn(fuser.norm1(torch.cat([x, visual], 1)))[:, :80]
    h = h + math.tanh(float(fuser.alpha_dense)) * fuser.ff(fuser.norm2(h))
    torch.testing.assert_close(patch(x, {"transformer_index": 3}), h, rtol=1e-5, atol=1e-5)
    with pytest.raises(GligenError, match="at most 30"):
        gligen.set_position((1, 4, 8, 8), [(text, 1, 1, 0, 0)] * 31, "cpu")


def test_zero_gates_leave_the_unet_output_unchanged(sd1):
    model = sd1[0]
    gligen = load_gligen(write_tiny_gligen(sd1[2] / "zero", "sd1", alpha=0.0)).model
    dm = model.model
    g = torch.Generator().manual_seed(1)
    x, ctx = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 77, 64, generator=g)
    sigma = torch.tensor([3.0])
    patch = gligen.set_position((1, 4, 8, 8), [(torch.randn(1, 64, generator=g), 2, 2, 0, 0)], "cpu")
    seen = []

    def counting(h, extra):
        seen.append(extra["transformer_index"])
        return patch(h, extra)
    with torch.no_grad():
        plain = dm.apply_model(x, sigma, ctx, transformer_options={"cond_or_uncond": [0]})
        grounded = dm.apply_model(x, sigma, ctx, transformer_options={"cond_or_uncond": [0],
                                                                      "patches": {"middle_patch": [counting]}})
    assert torch.equal(plain, grounded)
    assert seen == list(range(len(gligen.module_list)))  # every fuser, in UNet order


def test_sampling_with_boxes_grounds_both_prompts_and_changes_the_result(sd1):
    from nodes.conditioning import clip_text_encode
    from nodes.gligen import gligen_textbox_apply
    from nodes.sampling import ksampler

    model, clip, root = sd1
    gligen = load_gligen(write_tiny_gligen(root / "live", "sd1", seed=4))
    pos, neg = clip_text_encode("a cat", clip)[0], clip_text_encode("", clip)[0]
    grounded = gligen_textbox_apply(pos, clip, gligen, "a dog", 32, 24, 8, 16)[0]
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    conds = prepare_conds({"positive": convert_cond(grounded, "positive"), "negative": convert_cond(neg, "negative")},
                          torch.zeros(1, 4, 8, 8), model.model.model_sampling, None)
    # ComfyUI's apply_empty_x_to_equal_area: the negative runs with the positive's boxes.
    assert conds["negative"][0]["gligen"] is conds["positive"][0]["gligen"]
    # Each entry has its own patch object, so the two never share a batch (as in ComfyUI).
    assert conds["negative"][0]["patches"]["middle_patch"][0] is not conds["positive"][0]["patches"]["middle_patch"][0]
    base = ksampler(model, 1, 2, 4.0, "euler", "normal", pos, neg, latent)[0]["samples"]
    out = ksampler(model, 1, 2, 4.0, "euler", "normal", grounded, neg, latent)[0]["samples"]
    assert torch.isfinite(out).all() and not torch.equal(out, base)


def test_a_file_without_fusers_is_refused(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.checkpoint.errors import MissingComponentError

    save_file({"position_net.null_positive_feature": torch.zeros(4)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(MissingComponentError, match="not a GLIGEN model"):
        load_gligen(tmp_path / "x.safetensors")
