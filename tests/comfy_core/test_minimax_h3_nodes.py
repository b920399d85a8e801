"""MiniMax H3's nodes (nodes/minimax_h3_nodes.py): the AV latent geometry, what each conditioning
node hands the text encoder and the DiT, the shift node and the sampler's carried audio scale,
BlockSparseAttention's checks and its dense result."""
from __future__ import annotations

import pytest
import torch

from comfy_core.latent.nested import NestedTensor
from nodes.errors import NodeInputError
from nodes.minimax_h3_nodes import (block_sparse_attention, empty_minimax_h3_latent_av, minimax_h3_add_guide,
                                    minimax_h3_image_to_video, minimax_h3_reference_to_video,
                                    minimax_h3_sigma_shift, temporal_shape)


class FakeClip:
    """Records what a node tokenizes; encodes to one zero entry."""

    def __init__(self):
        self.calls = []

    def tokenize(self, text, **kwargs):
        self.calls.append((text, kwargs))
        return {"qwen3vl_32b": [[(1, 1.0)]]}

    def encode_from_tokens(self, tokens, **kwargs):
        return torch.zeros(1, 1, 8)

    def encode_from_tokens_scheduled(self, tokens):
        return [[torch.zeros(1, 1, 8), {"minimax_token_tags": torch.ones(1, dtype=torch.long)}]]


class FakeVAE:
    """The video VAE's latent geometry: 24 channels at 16x, 1 + (frames - 1) // 17 * 5 + ... frames."""

    def __init__(self):
        self.encoded = []

    def encode(self, pixels):
        self.encoded.append(pixels)
        n = pixels.shape[0]
        t = 1 if n == 1 else (n - 5) // 17 * 5 + 2
        return torch.full((1, 24, t, pixels.shape[1] // 16, pixels.shape[2] // 16), float(len(self.encoded)))

    def decode(self, latent):
        raise AssertionError("not decoded here")


def test_the_av_latent_snaps_to_the_17k_plus_5_grid():
    assert temporal_shape(124) == (124, 37, 207)
    assert temporal_shape(9) == (22, 7, 37)
    assert temporal_shape(5) == (5, 2, 8)
    (latent,) = empty_minimax_h3_latent_av(64, 32, 9)
    video, audio = latent["samples"].unbind()
    assert video.shape == (1, 24, 7, 2, 4) and audio.shape == (1, 32, 2, 37)
    with pytest.raises(NodeInputError):
        empty_minimax_h3_latent_av(64, 32, 4)


def test_image_to_video_shows_the_frames_to_the_encoder_and_anchors_them():
    clip, vae = FakeClip(), FakeVAE()
    first, last = torch.rand(1, 40, 70, 3), torch.rand(1, 70, 40, 3)
    cond, latent = minimax_h3_image_to_video(clip, vae, "a boat", 64, 32, 9, first_frame=first, last_frame=last)
    (text, kwargs), = clip.calls
    assert text == "a boat" and [tuple(i.shape) for i in kwargs["images"]] == [(1, 32, 64, 3)] * 2
    keyframes = cond[0][1]["minimax_keyframes"]
    assert [k["resolved_frame_index"] for k in keyframes] == [0, 21]
    assert [float(k["latent"].flatten()[0]) for k in keyframes] == [1.0, 2.0]
    torch.testing.assert_close(vae.encoded[0], kwargs["images"][0])
    assert latent["samples"].unbind()[0].shape == (1, 24, 7, 2, 4)
    cond, _ = minimax_h3_image_to_video(clip, vae, "t2v", 64, 32, 9)
    assert "minimax_keyframes" not in cond[0][1] and clip.calls[-1][1]["images"] == []


def test_add_guide_resolves_the_frame_crops_clips_and_chains():
    vae = FakeVAE()
    (latent,) = empty_minimax_h3_latent_av(64, 32, 22)
    cond = [[torch.zeros(1, 1, 8), {"minimax_keyframes": [{"resolved_frame_index": 0}]}]]
    (cond,) = minimax_h3_add_guide(cond, latent, -1, vae=vae, image=torch.rand(3, 32, 64, 3))
    (cond,) = minimax_h3_add_guide(cond, latent, 0, vae=vae, image=torch.rand(21, 32, 64, 3))
    keyframes = cond[0][1]["minimax_keyframes"]
    assert [k["resolved_frame_index"] for k in keyframes] == [0, 21, 0]
    assert [p.shape[0] for p in vae.encoded] == [1, 5]  # under 5 frames: the first; else cropped to 17k + 5
    with pytest.raises(NodeInputError, match="frame_idx"):
        minimax_h3_add_guide(cond, latent, 18, vae=vae, image=torch.rand(5, 32, 64, 3))
    with pytest.raises(NodeInputError, match="image"):
        minimax_h3_add_guide(cond, latent, 0)
    with pytest.raises(NodeInputError, match="latent"):
        minimax_h3_add_guide(cond, {"samples": torch.zeros(1, 24, 7, 2, 4)}, 0, vae=vae, image=torch.rand(1, 8, 8, 3))


def test_reference_to_video_presents_images_then_videos_then_audio():
    clip, vae = FakeClip(), FakeVAE()
    refs = {"ref_image_1": torch.rand(1, 64, 256, 3), "ref_image_0": torch.rand(1, 32, 32, 3)}
    video = torch.rand(30, 32, 64, 3)
    cond, _ = minimax_h3_reference_to_video(clip, "go", 64, 32, 22, vae=vae, ref_images=refs,
                                            ref_videos={"ref_video_0": video})
    (_, kwargs), = clip.calls
    items = kwargs["minimax_ref_items"]
    assert [i["type"] for i in items] == ["image", "image", "video"]
    assert tuple(items[0]["data"].shape) == (1, 32, 32, 3)  # ref_image_0 first; already under the area
    assert tuple(items[1]["data"].shape) == (1, 32, 96, 3)  # scaled down to 64 x 32 px of area, sides of 32
    assert items[2]["data"].shape[0] == 2 and items[2]["timestamps"] == [0.0, 0.5]  # 22 frames at 2 fps
    blocks = cond[0][1]["minimax_refs"]
    assert [(b["kind"], b.get("latent_t")) for b in blocks] == [("image", None), ("image", None), ("video", 7)]
    assert vae.encoded[2].shape[0] == 22  # the clip cropped to the generation's frames, 17k + 5
    with pytest.raises(NodeInputError, match="5 frames"):
        minimax_h3_reference_to_video(FakeClip(), "go", 64, 32, 22, ref_videos={"ref_video_0": video[:4]})


@pytest.fixture(scope="module")
def patcher():
    from comfy_core.families.minimax_h3 import definition
    from comfy_core.families.minimax_h3.dit import MiniMaxH3Config, MiniMaxH3Model
    from comfy_core.patching.model import ModelPatcher
    from tests.fixtures.template_models_minimax_h3 import minimax_h3_dit_state

    family = definition()
    state = minimax_h3_dit_state(seed=2, text_dim=24)
    network = MiniMaxH3Model(MiniMaxH3Config.detect_from_weights(state))
    network.load_state_dict(state)
    return ModelPatcher(family.components.build_model(network.eval(), family, "flow", False))


def _sample(model, latent, steps=1):
    from comfy_core.sampling.guider import BasicGuider, sampler_object

    guider = BasicGuider(model)
    guider.set_conds([[torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(0)), {}]])
    noise = NestedTensor([torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) for p in latent.unbind()])
    sigmas = model.get_model_object("model_sampling").sigma(torch.linspace(1000, 0, steps + 1)).float()
    sigmas[-1] = 0.0
    return guider.sample(noise, latent, sampler_object("euler"), sigmas, seed=3), noise


def test_the_sampler_carries_the_audio_at_the_shift_ratio(patcher):
    """One Euler step from sigma 1 lands on the model's x0: the audio part comes back divided by
    shift_video / shift_audio (the latent's model-space scale), the video part as it is."""
    (shifted,) = minimax_h3_sigma_shift(patcher, 8.0, 2.0)
    sampling = shifted.get_model_object("model_sampling")
    assert (sampling.shift, sampling.audio_shift, sampling.audio_scale) == (8.0, 2.0, 4.0)
    assert shifted.model_options["transformer_options"]["minimax_h3_sigma_shift_video"] == 8.0
    (latent,) = empty_minimax_h3_latent_av(64, 32, 5)
    out, noise = _sample(shifted, latent["samples"])
    from comfy_core.latent.nested import pack_latents

    packed, shapes = pack_latents(noise.unbind())
    with shifted.applied() as dm:
        cond = dm.extra_inputs(cross_attn=torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(0)),
                               latent_shapes=shapes, device=torch.device("cpu"), seed=3)
        x0 = dm.apply_model(packed, torch.ones(1), cond.pop("c_crossattn"),
                            transformer_options=dict(shifted.model_options["transformer_options"]), **cond)
    video, audio = out.unbind()
    from comfy_core.latent.nested import unpack_latents

    want_v, want_a = unpack_latents(x0, shapes)
    torch.testing.assert_close(video, want_v, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(audio, want_a / 4.0, rtol=1e-4, atol=1e-5)


def test_block_sparse_attention_is_dense_here_and_vsa_needs_minimax(patcher):
    (patched,) = block_sparse_attention(patcher, {"selection": "vsa", "keep_percent": 10.0}, 0.2, 1.0,
                                        dense_blocks="0, 2-3", min_tokens=0, extra_tokens=256)
    options = patched.model_options["transformer_options"]["block_sparse_attention"]
    assert options["mode"] == "vsa" and options["dense_blocks"] == [0, 2, 3] and options["extra_tokens"] == 0
    (latent,) = empty_minimax_h3_latent_av(64, 32, 5)
    dense, _ = _sample(patcher, latent["samples"])
    sparse, _ = _sample(patched, latent["samples"])
    for a, b in zip(dense.unbind(), sparse.unbind()):
        torch.testing.assert_close(a, b)
    other = type("Other", (), {"clone": lambda self: self, "model": type("M", (), {"family": None})()})()
    with pytest.raises(NodeInputError, match="MiniMax H3"):
        block_sparse_attention(other, {"selection": "vsa", "keep_percent": 10.0}, 0.2, 1.0)
    with pytest.raises(NodeInputError, match="selection"):
        block_sparse_attention(patcher, {"selection": "dense"}, 0.2, 1.0)


def test_vae_decode_nodes_take_their_part_of_the_av_latent(monkeypatch):
    """ComfyUI's VAEDecode decodes a nested latent's first part; the audio VAE gets the audio part."""
    import nodes.audio_latent
    from nodes.audio_latent import vae_decode_audio
    from nodes.latent import vae_decode

    class Video(FakeVAE):
        latent_dim = 3

        def decode(self, latent):
            return torch.full((latent.shape[2], 16, 16, 3), float(latent.shape[1]) / 100)

    class Audio:
        audio_sample_rate = 32000

        def encode(self, waveform):
            raise AssertionError("not encoded here")

        def decode(self, latent):
            return torch.zeros(1, latent.shape[-1] * 800, 2) + latent.shape[1]

    (latent,) = empty_minimax_h3_latent_av(64, 32, 5)
    (images,) = vae_decode(latent, Video())
    assert images.shape == (2, 16, 16, 3) and float(images[0, 0, 0, 0]) == pytest.approx(0.24)
    monkeypatch.setattr(nodes.audio_latent, "_audio_vae", lambda vae: vae)  # the fake stands for a loaded one
    (audio,) = vae_decode_audio(latent, Audio())
    assert audio["waveform"].shape == (1, 2, 8 * 800) and audio["sample_rate"] == 32000


def test_cfg_runs_the_two_conditionings_apart(patcher):
    """Positive and negative (same length, their own tags) go through separate passes: the
    guided result is uncond + cfg * (cond - uncond) of single-conditioning runs."""
    from comfy_core.sampling.guider import CFGGuider, sampler_object

    (latent,) = empty_minimax_h3_latent_av(64, 32, 5)
    positive = [[torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(0)),
                 {"minimax_token_tags": torch.tensor([1, 0, 0, 1, 1])}]]
    negative = [[torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(1)),
                 {"minimax_token_tags": torch.tensor([1, 1, 1, 1, 1])}]]
    noise = NestedTensor([torch.randn(p.shape, generator=torch.Generator().manual_seed(2))
                          for p in latent["samples"].unbind()])
    sigmas = torch.tensor([1.0, 0.0])

    def run(pos, neg, cfg):
        guider = CFGGuider(patcher)
        guider.set_conds(pos, neg)
        guider.set_cfg(cfg)
        return guider.sample(noise, latent["samples"], sampler_object("euler"), sigmas, seed=3).unbind()

    guided = run(positive, negative, 2.0)
    cond = run(positive, positive, 1.0)
    uncond = run(negative, negative, 1.0)
    for g, c, u in zip(guided, cond, uncond):
        torch.testing.assert_close(g, u + 2.0 * (c - u), rtol=1e-4, atol=1e-4)


def test_a_noise_mask_keeps_its_region_and_refuses_a_mask_finer_than_the_patches(patcher):
    from comfy_core.families.minimax_h3.conditions import token_grid_masks
    from comfy_core.latent.nested import pack_latents
    from comfy_core.models.model_conditions import ConditioningError
    from comfy_core.sampling.guider import BasicGuider, sampler_object

    fine = torch.ones(1, 24, 2, 2, 4)
    fine[..., 0, 0] = 0.3  # one pixel of a 2x2 patch
    packed, shapes = pack_latents([fine, torch.ones(1, 32, 2, 3)])
    video, audio = token_grid_masks(packed, shapes)
    assert float(video[0, 0, 0, 1, 1]) == pytest.approx(1.0)  # the patch's largest value
    assert torch.all(audio == 1.0)
    (latent,) = empty_minimax_h3_latent_av(64, 32, 5)
    start = NestedTensor([torch.randn(p.shape, generator=torch.Generator().manual_seed(5))
                          for p in latent["samples"].unbind()])
    mask = torch.ones(1, 1, 2, 2, 4)
    mask[..., :2, :2] = 0.0  # the first 2x2 patch of both latent frames is kept
    guider = BasicGuider(patcher)
    guider.set_conds([[torch.randn(1, 5, 24, generator=torch.Generator().manual_seed(0)), {}]])
    noise = NestedTensor([torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) for p in start.unbind()])
    out = guider.sample(noise, start, sampler_object("euler"), torch.tensor([1.0, 0.5, 0.0]), denoise_mask=mask,
                        seed=3).unbind()
    torch.testing.assert_close(out[0][..., :2, :2], start.unbind()[0][..., :2, :2])
    assert not torch.allclose(out[0][..., 2:], start.unbind()[0][..., 2:])
    fine_mask = torch.ones(1, 1, 2, 2, 4)
    fine_mask[..., 0, 0] = 0.0
    with pytest.raises(ConditioningError, match="2x2"):
        guider.sample(noise, start, sampler_object("euler"), torch.tensor([1.0, 0.0]), denoise_mask=fine_mask, seed=3)


def test_the_kept_region_is_injected_near_clean_with_the_audio_at_its_carried_scale(patcher):
    from comfy_core.families.minimax_h3.layout import time_shift_sigma
    from comfy_core.latent.nested import pack_latents, unpack_latents

    clean = [torch.randn(1, 24, 2, 2, 4), torch.randn(1, 32, 2, 3)]
    noise = [torch.randn(1, 24, 2, 2, 4), torch.randn(1, 32, 2, 3)]
    packed, shapes = pack_latents(clean)
    kept = torch.ones(1, 24, 2, 2, 4)
    kept[..., :2, :2] = 0.0
    mask = pack_latents([kept, torch.ones(1, 32, 2, 3)])[0]
    with patcher.applied() as dm:
        dm.extra_inputs(cross_attn=torch.zeros(1, 2, 24), latent_shapes=shapes, denoise_mask=mask,
                        device=torch.device("cpu"))
        sigma = torch.full((1, 1, 1), 0.5)
        injected = dm.scale_latent_inpaint(sigma=sigma, noise=pack_latents(noise)[0], latent_image=packed)
    video, audio = unpack_latents(injected, shapes)
    torch.testing.assert_close(video, 0.999 * clean[0] + 0.001 * noise[0])
    sigma_a = time_shift_sigma(0.5, 12.0, 3.0)
    torch.testing.assert_close(audio, clean[1] * (0.5 / sigma_a) / 4.0)
