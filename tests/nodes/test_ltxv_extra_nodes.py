"""Today's extra LTX nodes (nodes/ltxv_extra_nodes.py) against expectations composed by hand on
tiny tensors and the tiny LTX-Video VAE: LTXVFreezeLatent's masks; generated keyframes (auto and
manual placement, occupied frames skipped, RoPE spans, the growing attention entry, initial
content, separating them again, pinning them as guides on the same or a longer canvas);
LTXVModalityGuidance's extra pass and formula; LTXVContextWindows' frame conversion."""
from __future__ import annotations

import pytest
import torch

from comfy_core.latent.nested import NestedTensor
from comfy_core.loading import load_vae
from comfy_core.sampling import cond_batch
from comfy_core.sampling.context_windows import IndexListContextHandler
from nodes import ltxv_extra_nodes as ex
from nodes import ltxv_nodes as lt
from nodes.errors import NodeInputError
from tests.fixtures.ltxv_files import write_tiny_ltxv_vae
from tests.nodes.test_context_window_nodes import MODEL


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    return load_vae(write_tiny_ltxv_vae(tmp_path_factory.mktemp("vae") / "vae.safetensors", "0.9.0"))


def _cond(value: float = 1.0):
    return [[torch.full((1, 4, 64), value), {"pooled_output": None}]]


def _spans(frame: int) -> torch.Tensor:
    """`[3, 4, 2]` pixel spans of one 2x2 latent frame standing for pixel frame `frame` (32x VAE)."""
    y, x = torch.tensor([0, 0, 32, 32]), torch.tensor([0, 32, 0, 32])
    t = torch.full((4,), frame)
    return torch.stack([torch.stack([t, t + 1], -1), torch.stack([y, y + 32], -1), torch.stack([x, x + 32], -1)])


# --- LTXVFreezeLatent ---

def test_freeze_latent_zeroes_the_noise_mask_of_video_and_audio():
    video = {"samples": torch.rand(2, 128, 3, 2, 2), "noise_mask": torch.ones(2, 1, 3, 1, 1), "batch_index": [4, 5]}
    (out,) = ex.ltxv_freeze_latent(video)
    assert torch.equal(out["noise_mask"], torch.zeros(2, 1, 3, 1, 1)) and out["noise_mask"].dtype == torch.float32
    assert out["samples"] is video["samples"] and out["batch_index"] == [4, 5]
    assert torch.equal(video["noise_mask"], torch.ones(2, 1, 3, 1, 1))  # the input is not changed
    (audio,) = ex.ltxv_freeze_latent({"samples": torch.rand(1, 8, 25, 16)})
    assert torch.equal(audio["noise_mask"], torch.zeros(1, 1, 25, 1))
    with pytest.raises(NodeInputError, match="Separate AV"):
        ex.ltxv_freeze_latent({"samples": NestedTensor((torch.zeros(1, 128, 1, 1, 1), torch.zeros(1, 8, 2, 16)))})
    with pytest.raises(NodeInputError, match="4D audio or 5D"):
        ex.ltxv_freeze_latent({"samples": torch.zeros(1, 4, 8)})


# --- generated keyframes ---

def test_auto_placement_spaces_keyframes_and_appends_denoised_slots(vae):
    latent = {"samples": torch.zeros(1, 128, 7, 2, 2)}  # 49 pixel frames
    positive, negative, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(2.0), vae, latent, interval_frames=16)
    # round(48 / 16) = 3 keyframes at linspace(0, 48, 4)[1:] = 16, 32, 48
    record = positive[0][1]["generated_keyframes"]
    assert record == {"first_latent_frame": 7, "num_keyframes": 3, "frame_indices": [16, 32, 48],
                      "num_pixel_frames": 49, "guide_entry_index": 0, "tokens_per_frame": 4}
    assert negative[0][1]["generated_keyframes"] == record
    assert out["samples"].shape == (1, 128, 10, 2, 2) and torch.equal(out["samples"], torch.zeros(1, 128, 10, 2, 2))
    assert torch.equal(out["noise_mask"], torch.ones(1, 1, 10, 1, 1))  # generated, so fully denoised
    expected = torch.cat([_spans(16), _spans(32), _spans(48)], dim=1).unsqueeze(0)
    assert torch.equal(positive[0][1]["keyframe_idxs"], expected)
    assert positive[0][1]["guide_attention_entries"] == [
        {"pre_filter_count": 12, "strength": 1.0, "pixel_mask": None, "latent_shape": [3, 2, 2]}]
    assert lt.keyframe_count(positive, out["samples"].shape)[1] == 3  # LTXVCropGuides' count sees them
    # frames an image holds are skipped: latent frame 2 masked (pixel 16), the last latent frame (pixel 48)
    mask = torch.ones(1, 1, 7, 1, 1)
    mask[:, :, 2] = 0.0
    mask[:, :, 6] = 0.5
    positive, _, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, {**latent, "noise_mask": mask}, 16)
    assert positive[0][1]["generated_keyframes"]["frame_indices"] == [32]
    assert torch.equal(out["noise_mask"][0, 0, :, 0, 0], torch.tensor([1.0, 1, 0, 1, 1, 1, 0.5, 1]))
    # without a mask a non-zero latent frame counts as held (latent frame 4 -> pixel 32)
    held = torch.zeros(1, 128, 7, 2, 2)
    held[:, :, 4] = 1.0
    positive, _, _ = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, {"samples": held}, 16)
    assert positive[0][1]["generated_keyframes"]["frame_indices"] == [16, 48]


def test_manual_indices_grow_the_record_and_refuse_taken_frames(vae):
    latent = {"samples": torch.zeros(1, 128, 4, 2, 2)}  # 25 pixel frames
    positive, negative, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, frame_indices="8")
    positive, negative, out = ex.ltxv_add_generated_keyframes(positive, negative, vae, out, 24,
                                                              frame_indices="24, 3")
    record = positive[0][1]["generated_keyframes"]
    assert (record["first_latent_frame"], record["num_keyframes"], record["frame_indices"]) == (4, 3, [8, 24, 3])
    entries = positive[0][1]["guide_attention_entries"]
    assert len(entries) == 1 and entries[0]["pre_filter_count"] == 12 and entries[0]["latent_shape"] == [3, 2, 2]
    assert negative[0][1]["guide_attention_entries"] == entries
    starts = positive[0][1]["keyframe_idxs"][0, 0, ::4, 0].tolist()
    assert starts == [8, 24, 3] and out["samples"].shape[2] == 7
    with pytest.raises(NodeInputError, match="frame_indices"):  # 8 already holds a keyframe
        ex.ltxv_add_generated_keyframes(positive, negative, vae, out, 24, frame_indices="8")
    with pytest.raises(NodeInputError, match="between 1 and 24"):  # frame 0 is the video's own first token
        ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 24, frame_indices="0")
    with pytest.raises(NodeInputError, match="once"):
        ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 24, frame_indices="5,5")
    with pytest.raises(NodeInputError, match="integers"):
        ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 24, frame_indices="5,x")
    with pytest.raises(NodeInputError, match="Concat AV"):
        ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, {"samples": torch.zeros(1, 8, 4, 16)}, 24)
    with pytest.raises(NodeInputError, match="tokens per frame"):  # rescaled after the first keyframes
        ex.ltxv_add_generated_keyframes(positive, negative, vae, {"samples": torch.zeros(1, 128, 7, 4, 4)}, 24)


def test_initial_content_from_a_video_or_from_separated_keyframes(vae):
    latent = {"samples": torch.zeros(1, 128, 7, 2, 2)}
    video = torch.arange(7, dtype=torch.float32).view(1, 1, 7, 1, 1).expand(1, 128, 7, 2, 2)
    _, _, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 16, keyframes={"samples": video})
    # a longer video: its nearest latent frame to each index, round(16 / 8) = 2, 4, 6
    assert out["samples"][0, 0, 7:, 0, 0].tolist() == [2.0, 4.0, 6.0]
    fewer = {"samples": torch.full((1, 128, 2, 2, 2), 5.0), "generated_keyframe_indices": [1, 2]}
    _, _, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 16, keyframes=fewer)
    assert out["samples"][0, 0, 7:, 0, 0].tolist() == [5.0, 5.0, 0.0]  # padded with zeros to the slots
    singles = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1, 1).expand(3, 128, 1, 2, 2)
    _, _, out = ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 16, keyframes={"samples": singles})
    assert out["samples"][0, 0, 7:, 0, 0].tolist() == [0.0, 1.0, 2.0]  # a batch of single frames, regrouped
    with pytest.raises(NodeInputError, match="whole latent frames"):
        ex.ltxv_add_generated_keyframes(_cond(), _cond(), vae, latent, 16,
                                        keyframes={"samples": torch.zeros(1, 128, 2, 4, 4),
                                                   "generated_keyframe_indices": [1, 2]})


def test_separate_takes_them_back_out_after_a_guide(vae):
    latent = {"samples": torch.zeros(1, 128, 7, 2, 2)}
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(3))
    positive, negative, guided = lt.ltxv_add_guide(_cond(), _cond(), vae, latent, image, frame_idx=9, strength=0.5)
    guide_idxs, guide_entries = positive[0][1]["keyframe_idxs"], positive[0][1]["guide_attention_entries"]
    pos_kf, neg_kf, out = ex.ltxv_add_generated_keyframes(positive, negative, vae, guided, 16)
    # the guide's pixel frame (9) is not a candidate anyway; its slot and the video's 7 frames stay
    assert pos_kf[0][1]["generated_keyframes"]["first_latent_frame"] == 8
    assert pos_kf[0][1]["generated_keyframes"]["guide_entry_index"] == 1
    sampled = dict(out)
    sampled["samples"] = torch.arange(11, dtype=torch.float32).view(1, 1, 11, 1, 1).expand(1, 128, 11, 2, 2).clone()
    pos, neg, video, keyframes = ex.ltxv_separate_generated_keyframes(pos_kf, neg_kf, sampled)
    assert video["samples"][0, 0, :, 0, 0].tolist() == [0.0, 1, 2, 3, 4, 5, 6, 7]
    assert torch.allclose(video["noise_mask"][0, 0, :, 0, 0], torch.tensor([1.0] * 7 + [0.5]))
    assert keyframes["samples"][0, 0, :, 0, 0].tolist() == [8.0, 9.0, 10.0]
    assert keyframes["generated_keyframe_indices"] == [16, 32, 48] and keyframes["generated_keyframe_num_frames"] == 49
    for cond in (pos, neg):
        assert torch.equal(cond[0][1]["keyframe_idxs"], guide_idxs)
        assert cond[0][1]["guide_attention_entries"] == guide_entries and cond[0][1]["generated_keyframes"] is None
    _, _, _, batch = ex.ltxv_separate_generated_keyframes(pos_kf, neg_kf, sampled, keyframes_to_batch=True)
    assert batch["samples"].shape == (3, 128, 1, 2, 2) and batch["samples"][:, 0, 0, 0, 0].tolist() == [8.0, 9, 10]
    # alone: the conditioning is left with nothing
    pos, _, video, _ = ex.ltxv_separate_generated_keyframes(*ex.ltxv_add_generated_keyframes(
        _cond(), _cond(), vae, latent, 16))
    assert pos[0][1]["keyframe_idxs"] is None and pos[0][1]["guide_attention_entries"] is None
    assert video["samples"].shape[2] == 7
    with pytest.raises(NodeInputError, match="generated keyframes"):
        ex.ltxv_separate_generated_keyframes(_cond(), _cond(), latent)
    with pytest.raises(NodeInputError, match="upscaling"):
        ex.ltxv_separate_generated_keyframes(pos_kf, neg_kf, {"samples": torch.zeros(1, 128, 11, 4, 4)})


def test_keyframes_become_frozen_guides_on_a_longer_canvas(vae):
    keyframes = {"samples": torch.rand(1, 128, 2, 2, 2, generator=torch.Generator().manual_seed(4)),
                 "generated_keyframe_indices": [16, 40], "generated_keyframe_num_frames": 49}
    target = {"samples": torch.zeros(1, 128, 13, 2, 2)}  # 97 pixel frames: indices x2
    positive, negative, out = ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, target, keyframes, 1.0)
    assert out["samples"].shape == (1, 128, 15, 2, 2)
    assert torch.equal(out["samples"][:, :, 13:], keyframes["samples"])
    assert torch.equal(out["noise_mask"][0, 0, :, 0, 0], torch.tensor([1.0] * 13 + [0.0, 0.0]))
    expected = torch.cat([_spans(32), _spans(80)], dim=1).unsqueeze(0)
    assert torch.equal(positive[0][1]["keyframe_idxs"], expected)
    assert positive[0][1]["guide_attention_entries"] == [
        {"pre_filter_count": 4, "strength": 1.0, "pixel_mask": None, "latent_shape": [1, 2, 2]}] * 2
    assert negative[0][1]["guide_attention_entries"] == positive[0][1]["guide_attention_entries"]
    # explicit positions, relaxed strength
    positive, _, out = ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, target, keyframes, 0.25, "5, 90")
    assert positive[0][1]["keyframe_idxs"][0, 0, ::4, 0].tolist() == [5, 90]
    assert torch.allclose(out["noise_mask"][0, 0, 13:, 0, 0], torch.tensor([0.75, 0.75]))
    with pytest.raises(NodeInputError, match="exactly 2"):
        ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, target, keyframes, 1.0, "5")
    with pytest.raises(NodeInputError, match="Separate Generated Keyframes"):
        ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, target, {"samples": keyframes["samples"]}, 1.0)
    with pytest.raises(NodeInputError, match="batch of 1"):
        ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, {"samples": torch.zeros(2, 128, 13, 2, 2)},
                                              keyframes, 1.0)
    still = [[torch.zeros(1, 4, 64), {"generated_keyframes": {"num_keyframes": 1}}]]
    with pytest.raises(NodeInputError, match="Separate"):
        ex.ltxv_generated_keyframes_to_guides(still, _cond(), vae, target, keyframes, 1.0)


def test_keyframes_of_another_size_are_decoded_and_added_as_image_guides(vae):
    small = {"samples": torch.rand(1, 128, 1, 2, 2, generator=torch.Generator().manual_seed(5)),
             "generated_keyframe_indices": [8], "generated_keyframe_num_frames": 17}
    target = {"samples": torch.zeros(1, 128, 3, 4, 4)}
    positive, negative, out = ex.ltxv_generated_keyframes_to_guides(_cond(), _cond(), vae, target, small, 1.0)
    image = vae.decode(small["samples"]).reshape(-1, 64, 64, 3)
    want = lt.ltxv_add_guide(_cond(), _cond(), vae, target, image, 8, 1.0)
    assert torch.allclose(out["samples"], want[2]["samples"], atol=1e-6)
    assert torch.equal(out["noise_mask"], want[2]["noise_mask"])
    assert torch.equal(positive[0][1]["keyframe_idxs"], want[0][0][1]["keyframe_idxs"])


def test_placement_helpers():
    assert ex.detailing_positions(97, 24) == [24, 48, 72, 96]
    assert ex.detailing_positions(9, 100) == [8]  # at least one, the last frame kept
    assert ex.scale_frame_indices([16, 40], 49, 97) == [32, 80]
    with pytest.raises(NodeInputError, match="distinct"):
        ex.scale_frame_indices([1, 2], 49, 9)


# --- LTXVModalityGuidance ---

def test_modality_guidance_runs_the_uncoupled_pass_and_scales_the_difference(monkeypatch):
    (patched,) = ex.ltxv_modality_guidance(MODEL, 3.0, 0.0, 1.0)
    (hook,) = patched.model_options["sampler_post_cfg_function"]
    assert isinstance(hook, ex.ModalityGuidance) and "sampler_post_cfg_function" not in MODEL.model_options
    seen = []

    def fake_batch(model, conds, x, sigma, options):
        seen.append(options["transformer_options"])
        return [torch.full_like(x, 0.5)]

    monkeypatch.setattr(cond_batch, "calc_cond_batch_in_force", lambda: fake_batch)
    x = torch.zeros(1, 4)
    args = {"denoised": torch.full((1, 4), 2.0), "cond_denoised": torch.full((1, 4), 1.0), "cond": [{}],
            "input": x, "sigma": torch.tensor([0.5]), "model": None,
            "model_options": {"transformer_options": {"keep": 1}}}
    out = ex.ModalityGuidance(3.0, 1.0, 0.0)(args)
    assert torch.allclose(out, torch.full((1, 4), 2.0 + (1.0 - 0.5) * 2.0))
    assert seen == [{"keep": 1, "a2v_cross_attn": False, "v2a_cross_attn": False}]
    assert args["model_options"] == {"transformer_options": {"keep": 1}}  # not mutated
    for hook, sigma in ((ex.ModalityGuidance(1.0, 1.0, 0.0), 0.5), (ex.ModalityGuidance(3.0, 0.875, 0.25), 0.9375),
                        (ex.ModalityGuidance(3.0, 0.875, 0.25), 0.25)):
        assert hook({**args, "sigma": torch.tensor([sigma])}) is args["denoised"]
    assert len(seen) == 1
    with pytest.raises(NodeInputError, match="modality_scale"):
        ex.ltxv_modality_guidance(MODEL, 0.5, 0.0, 1.0)


# --- LTXVContextWindows ---

@pytest.mark.parametrize("frames, overlap, latent_frames, latent_overlap",
                         [(145, 40, 19, 5), (97, 24, 13, 3), (1, 0, 1, 0), (9, 7, 2, 0)])
def test_context_windows_count_in_ltx_latent_frames(frames, overlap, latent_frames, latent_overlap):
    (patched,) = ex.ltxv_context_windows(MODEL, frames, overlap, "standard_uniform", "pyramid", freenoise=False)
    h = patched.model_options["context_handler"]
    assert isinstance(h, IndexListContextHandler) and "context_handler" not in MODEL.model_options
    assert (h.context_length, h.context_overlap, h.dim, h.freenoise) == (latent_frames, latent_overlap, 2, False)
    assert h.cond_retain_index_list == [] and h.latent_retain_index_list == []


def test_context_windows_retain_the_first_frame_in_conds_and_latent():
    (patched,) = ex.ltxv_context_windows(MODEL, 97, 24, "standard_static", "flat", True, True, False, 2, True)
    h = patched.model_options["context_handler"]
    assert h.cond_retain_index_list == [0] and h.latent_retain_index_list == [0]
    assert (h.context_schedule.name, h.fuse_method.name, h.context_stride, h.closed_loop) == \
        ("standard_static", "flat", 2, True)
    with pytest.raises(NodeInputError, match="context_schedule"):
        ex.ltxv_context_windows(MODEL, 97, 24, "nope", "flat")
