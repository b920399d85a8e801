"""The audio-video LATENT nodes (nodes/ltxv_av_nodes.py): LTXVConcatAVLatent / LTXVSeparateAVLatent
(keys, masks, an audio swapped into a joint latent trimmed or padded), their refusals, the sampler
nodes (KSampler, SamplerCustomAdvanced) on a nested LATENT of the tiny LTX-2 model, and the
`comfy.nested_tensor` / `comfy.utils` names packs import."""
from __future__ import annotations

import pytest
import torch

from comfy_core.latent.nested import NestedTensor
from nodes import ltxv_av_nodes as av
from nodes.errors import NodeInputError

F_, H_, W_, T_ = 2, 2, 3, 5


def _video(batch=1):
    return torch.randn(batch, 16, F_, H_, W_, generator=torch.Generator().manual_seed(1))


def _audio(length=T_):
    return torch.randn(1, 8, length, 16, generator=torch.Generator().manual_seed(2))


def test_concat_and_separate_round_trip_with_keys_and_masks():
    video, audio = _video(), _audio()
    (joint,) = av.ltxv_concat_av_latent({"samples": video, "batch_index": [0]},
                                        {"samples": audio, "type": "audio"})
    assert joint["samples"].is_nested and joint["batch_index"] == [0] and joint["type"] == "audio"
    assert "noise_mask" not in joint
    assert joint["samples"].unbind()[0] is video and joint["samples"].unbind()[1] is audio
    v, a = av.ltxv_separate_av_latent(joint)
    assert v["samples"] is video and a["samples"] is audio and v["type"] == "audio" and "noise_mask" not in a
    # one part masked: the other gets ones (denoised whole)
    audio_mask = torch.zeros(1, 1, T_, 1)
    (masked,) = av.ltxv_concat_av_latent({"samples": video}, {"samples": audio, "noise_mask": audio_mask})
    vm, am = masked["noise_mask"].unbind()
    assert torch.equal(vm, torch.ones_like(video)) and am is audio_mask
    v, a = av.ltxv_separate_av_latent(masked)
    assert torch.equal(v["noise_mask"], vm) and a["noise_mask"] is audio_mask


def test_an_audio_swapped_into_a_joint_latent_is_trimmed_or_padded():
    video = _video()
    (joint,) = av.ltxv_concat_av_latent({"samples": video}, {"samples": _audio()})
    longer = _audio(T_ + 3)
    (trimmed,) = av.ltxv_concat_av_latent(joint, {"samples": longer})
    assert trimmed["samples"].unbind()[0] is video and torch.equal(trimmed["samples"].unbind()[1], longer[:, :, :T_])
    shorter = _audio(T_ - 2)
    (padded,) = av.ltxv_concat_av_latent(joint, {"samples": shorter, "noise_mask": torch.zeros(1, 1, T_ - 2, 1)})
    got = padded["samples"].unbind()[1]
    assert got.shape == (1, 8, T_, 16) and torch.equal(got[:, :, :T_ - 2], shorter)
    assert torch.count_nonzero(got[:, :, T_ - 2:]) == 0
    mask = padded["noise_mask"].unbind()[1]  # the clip's frames kept, the padded tail generated
    assert mask.shape == (1, 8, T_, 16) and mask[:, :, :T_ - 2].sum() == 0 and bool((mask[:, :, T_ - 2:] == 1).all())
    with pytest.raises(NodeInputError, match="audio_latent"):
        av.ltxv_concat_av_latent(joint, {"samples": torch.zeros(1, 4, T_ + 1, 16)})  # two axes differ


def test_refusals():
    with pytest.raises(NodeInputError, match="av_latent"):
        av.ltxv_separate_av_latent({"samples": _video()})  # not a joint latent
    with pytest.raises(NodeInputError, match="noise_mask"):
        av.ltxv_separate_av_latent({"samples": NestedTensor([_video(), _audio()]), "noise_mask": torch.ones(1)})
    with pytest.raises(NodeInputError, match="audio_latent"):
        av.ltxv_concat_av_latent({"samples": _video()}, {"samples": NestedTensor([_audio()])})
    with pytest.raises(NodeInputError, match="video_latent"):
        av.ltxv_concat_av_latent({"samples": "video"}, {"samples": _audio()})


@pytest.fixture(scope="module")
def ltx2_model(tmp_path_factory):
    from comfy_core.families.ltx2.conditions import LTXAVConditions
    from comfy_core.families.ltxv.latent_format import LTXV
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.models.model_sampling import FlowModelSampling
    from comfy_core.patching.model import ModelPatcher
    from tests.comfy_core.test_ltx2_dit import _load

    network, _, _ = _load(tmp_path_factory.mktemp("ltx2"), "2.0")
    fmt = LTXV(name="ltxav-test", channels=16, latent_rgb_factors=(), latent_rgb_factors_bias=None)
    return ModelPatcher(DiffusionModel(network, FlowModelSampling(shift=1.0, multiplier=1.0), fmt,
                                       adm=LTXAVConditions()))


def test_sampler_nodes_take_a_nested_latent(ltx2_model):
    from comfy_core.sampling.guider import cfg_guider, sampler_object
    from comfy_core.sampling.noise_object import RandomNoise
    from nodes.custom_sampling import sampler_custom_advanced
    from nodes.sampling import ksampler

    context = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(3))
    cond = [[context, {"frame_rate": 25.0}]]
    (joint,) = av.ltxv_concat_av_latent({"samples": torch.zeros(1, 16, F_, H_, W_)},
                                        {"samples": torch.zeros(1, 8, T_, 16)})
    with torch.no_grad():
        (out,) = ksampler(ltx2_model, 5, 2, 1.0, "euler", "simple", cond, cond, joint)
        guider = cfg_guider(ltx2_model, cond, cond, 1.0)
        sigmas = torch.tensor([1.0, 0.5, 0.0])
        custom, denoised = sampler_custom_advanced(RandomNoise(5), guider, sampler_object("euler"), sigmas, joint)
    video, audio = out["samples"].unbind()
    assert video.shape == (1, 16, F_, H_, W_) and audio.shape == (1, 8, T_, 16)
    assert torch.count_nonzero(audio) > 0
    assert custom["samples"].is_nested and denoised["samples"].is_nested
    # the last step lands on sigma 0: its x0 is the output
    pairs = zip(custom["samples"].unbind(), denoised["samples"].unbind())
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in pairs)
    # the same seed and steps through either node: the same latent
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out["samples"].unbind(), custom["samples"].unbind()))


def test_packs_import_the_nested_tensor_and_packing(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    with compat.install(env, Registry()).activate():
        import comfy.nested_tensor
        import comfy.utils

        assert comfy.nested_tensor.NestedTensor is NestedTensor
        nt = comfy.nested_tensor.NestedTensor([_video(), _audio()])
        packed, shapes = comfy.utils.pack_latents(nt.unbind())
        again = comfy.utils.unpack_latents(packed, shapes)
        assert torch.equal(again[1], nt.unbind()[1])
        assert comfy.nested_tensor.cat_nested([nt, nt], dim=0).unbind()[0].shape[0] == 2
