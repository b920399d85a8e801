"""WanInfiniteTalkToVideo (nodes/wan_audio_nodes.py) as today's ComfyUI's: the I2V start-image
conditioning, the audio of the window projected by the patch into the clone's `audio_embeds`, the
patches and the sampling wrapper on a clone (the input MODEL unchanged), two speakers' masks at the
token grid, extending from previous frames, and the refusals (ComfyUI fails there with an unbound
local or a shape error)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.wan.dit import WanConfig, WanModel
from comfy_core.families.wan.multitalk import MultiTalkConfig, MultiTalkPatchNetwork, encoder_states
from comfy_core.latent.video import fit_frames
from comfy_core.model_patches.multitalk import (AUDIO_EMBEDS, OUTER_SAMPLE_KEY, MultiTalkAttnMapPatch,
                                                MultiTalkCrossAttnPatch)
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.patcher import Patcher
from comfy_core.wrappers import WrappersMP
from nodes.errors import NodeInputError
from nodes.wan_audio_nodes import wan_infinite_talk_to_video
from tests.comfy_core.test_wan_infinitetalk import AUDIO_DIM, FEATURES, HIDDEN, TOKENS, _projected
from tests.fixtures.template_models_wan_audio import multitalk_patch_state_dict
from tests.fixtures.wan_files import tiny_wan_state_dict
from tests.nodes.model_patch_helpers import snapshot
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames

SINGLE = {"mode": "single_speaker"}


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return multitalk_patch_state_dict(dim=256, layers=2, features=FEATURES, hidden=HIDDEN, audio_dim=AUDIO_DIM,
                                      tokens=TOKENS, seed=7)


@pytest.fixture(scope="module")
def patch(state) -> Patcher:
    net = MultiTalkPatchNetwork(MultiTalkConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return Patcher(net.eval(), load_device="cpu", offload_device="cpu")


@pytest.fixture(scope="module")
def model() -> ModelPatcher:
    sd = tiny_wan_state_dict("i2v", seed=1)
    holder = torch.nn.Module()
    holder.diffusion_model = WanModel.from_config(WanConfig.detect_from_weights(sd))
    holder.diffusion_model.load_state_dict(sd, strict=True)
    return ModelPatcher(holder.eval(), load_device="cpu", offload_device="cpu")


def _audio(frames_50=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    states = tuple(torch.randn(1, frames_50, FEATURES // 2, generator=g) for _ in range(3))  # embedding + 2 layers
    return {"encoded_audio": states[-1], "encoded_audio_all_layers": states, "audio_samples": frames_50 * 320}


def _run(mode, model, patch, length=9, **kwargs):
    with running_node("WanInfiniteTalkToVideo", "1"):
        return wan_infinite_talk_to_video(mode, model, patch, cond(1.0), cond(2.0), kwargs.pop("vae", FakeVideoVAE()),
                                          32, 16, length, kwargs.pop("audio", _audio()), 9, **kwargs)


def _patches(patched):
    return patched.model_options["transformer_options"].get("patches", {})


def test_single_speaker(model, patch, state):
    before = snapshot(model)
    vae, start = FakeVideoVAE(), frames(1, 16, 32, seed=2)
    audio = _audio()
    patched, pos, neg, latent, trim = _run(SINGLE, model, patch, vae=vae, audio=audio, audio_scale=0.5,
                                           start_image=start)
    assert snapshot(model) == before and patched is not model
    assert latent["samples"].shape == (1, 16, 3, 2, 4) and not latent["samples"].any() and trim == 0
    video = torch.full((9, 16, 32, 3), 0.5)
    video[:1] = start
    for c in (pos[0][1], neg[0][1]):
        assert torch.equal(c["concat_latent_image"], vae.latent_of(video))
        assert c["concat_mask"].shape == (1, 1, 3, 2, 4)
        assert not c["concat_mask"][:, :, :1].any() and c["concat_mask"][:, :, 1:].eq(1).all()
    embeds = patched.model_options["transformer_options"][AUDIO_EMBEDS]
    torch.testing.assert_close(embeds, _projected(state, [encoder_states(audio["encoded_audio_all_layers"])], 0, 9),
                               atol=1e-5, rtol=1e-4)
    (attn2,) = _patches(patched)["attn2_patch"]
    assert isinstance(attn2, MultiTalkCrossAttnPatch) and attn2.audio_scale == 0.5 and attn2.model_patch is patch
    assert "attn1_patch" not in _patches(patched)
    (wrapper,) = patched.wrappers[WrappersMP.OUTER_SAMPLE][OUTER_SAMPLE_KEY]
    assert torch.equal(wrapper.motion_latent, pos[0][1]["concat_latent_image"][:, :, :1]) and not wrapper.is_extend


def test_two_speakers_and_extending(model, patch, state):
    mask_1, mask_2 = torch.zeros(1, 16, 32), torch.zeros(1, 16, 32)
    mask_1[:, :, :16], mask_2[:, :, 16:] = 1.0, 1.0                 # left and right halves
    a, b = _audio(40, seed=1), _audio(30, seed=2)
    previous = frames(12, 8, 8, seed=3)
    vae = FakeVideoVAE()
    mode = {"mode": "two_speakers", "audio_encoder_output_2": b, "mask_1": mask_1, "mask_2": mask_2}
    patched, pos, _neg, _latent, trim = _run(mode, model, patch, vae=vae, audio=a, previous_frames=previous)
    assert trim == 9 and "concat_latent_image" not in pos[0][1]
    (attn1,) = _patches(patched)["attn1_patch"]
    assert isinstance(attn1, MultiTalkAttnMapPatch)
    assert torch.equal(attn1.masks, torch.tensor([[True, False], [False, True]]))  # the 1 x 2 token grid
    sa, sb = encoder_states(a["encoded_audio_all_layers"]), encoder_states(b["encoded_audio_all_layers"])
    speakers = [torch.cat([sa, torch.zeros_like(sb)]), torch.cat([torch.zeros_like(sa), sb])]  # one after the other
    torch.testing.assert_close(patched.model_options["transformer_options"][AUDIO_EMBEDS],
                               _projected(state, speakers, 3, 9), atol=1e-5, rtol=1e-4)  # from the 4th frame
    (wrapper,) = patched.wrappers[WrappersMP.OUTER_SAMPLE][OUTER_SAMPLE_KEY]
    assert wrapper.is_extend and torch.equal(wrapper.motion_latent, vae.latent_of(fit_frames(previous[-9:], 32, 16)))


def test_refusals(model, patch):
    start = frames(1, 16, 32)
    masks = {"mask_1": torch.ones(1, 16, 32), "mask_2": torch.ones(1, 16, 32)}
    cases = [
        ("start_image", dict(mode=SINGLE)),
        ("previous_frames", dict(mode=SINGLE, previous_frames=frames(4, 8, 8))),
        ("mask_1", dict(mode={"mode": "two_speakers", "audio_encoder_output_2": _audio()}, start_image=start)),
        ("audio_encoder_output_2", dict(mode={"mode": "two_speakers", **masks}, start_image=start)),
        ("length", dict(mode=SINGLE, start_image=start, length=8)),
        ("audio_encoder_output_1", dict(mode=SINGLE, start_image=start, audio={"nope": 1})),
    ]
    for name, kwargs in cases:
        mode = kwargs.pop("mode")
        with pytest.raises(NodeInputError, match=name):
            _run(mode, model, patch, **kwargs)
    with pytest.raises(NodeInputError, match="model_patch"):
        _run(SINGLE, model, Patcher(torch.nn.Linear(2, 2)), start_image=start)
    other = MultiTalkPatchNetwork(MultiTalkConfig(dim=128, num_layers=2, features=FEATURES, intermediate_dim=4,
                                                  out_dim=4, context_tokens=2))
    with pytest.raises(NodeInputError, match="128 wide"):
        _run(SINGLE, model, Patcher(other), start_image=start)
