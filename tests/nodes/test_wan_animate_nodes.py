"""WanAnimate2ToVideo / WanAnimate2Cache (nodes/wan_animate_nodes.py) against ComfyUI's behaviour
composed here with a fake Wan VAE, and a sampling run of the tiny Animate 2 network through the
cache (the pose branch computed once, read back on the later steps)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from nodes.errors import NodeInputError
from nodes.wan_animate_nodes import wan_animate2_cache, wan_animate2_to_video
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def _run(*args, **kwargs):
    with running_node("WanAnimate2ToVideo", "1"):
        return wan_animate2_to_video(*args, **kwargs)


def test_reference_slot_pose_video_and_outputs():
    vae = FakeVideoVAE()
    ref, pose = frames(1, 16, 16, seed=1), frames(12, 16, 16, seed=2)
    clip = type("Out", (), {"penultimate_hidden_states": torch.ones(1, 3, 8)})()
    pos, neg, latent, trim_latent, trim_image, offset = _run(
        cond(1.0), cond(2.0), vae, 16, 16, 9, 2, 3, reference_image=ref, pose_video=pose, clip_vision_output=clip,
        positive_pose=cond(5.0), pose_strength=0.5, reference_image_strength=1.5)
    assert latent["samples"].shape == (2, 16, 1 + 3, 2, 2) and (trim_latent, trim_image, offset) == (1, 0, 12)
    p, n = pos[0][1], neg[0][1]
    want_concat = torch.cat([vae.latent_of(ref), vae.latent_of(torch.full((9, 16, 16, 3), 0.5))], dim=2)
    torch.testing.assert_close(p["concat_latent_image"], want_concat)
    assert p["concat_mask"].shape == (1, 1, 4, 2, 2)
    assert p["concat_mask"][:, :, 0].eq(0).all() and p["concat_mask"][:, :, 1:].eq(1).all()
    held = torch.cat([pose[3:], pose[-1:].expand(3, -1, -1, -1)])  # 9 frames from 3, the last held
    for entry in (p, n):  # the pose values on the negative too
        torch.testing.assert_close(entry["pose_video_latent"], vae.latent_of(held))
        assert torch.equal(entry["cross_attn_pose"], torch.full((1, 3, 8), 5.0))
        assert entry["clip_vision_output_pose"] is clip and entry["clip_vision_output"] is clip
        assert entry["pose_strength"] == 0.5 and entry["reference_strength"] == 1.5
        assert "start_percent" not in entry
    assert p["keep"] == 1.0 and n["keep"] == 2.0


def test_continue_motion_and_defaults():
    vae = FakeVideoVAE()
    previous, pose = frames(5, 16, 16, seed=4), frames(20, 16, 16, seed=5)
    pos, neg, latent, trim_latent, trim_image, offset = _run(
        cond(1.0), cond(2.0), vae, 16, 16, 5, 1, 9, pose_video=pose, continue_motion=previous)
    # the last frame continues: the pose video is read one frame earlier, that frame kept known
    assert (trim_latent, trim_image, offset) == (1, 1, 8 + 5)
    p = pos[0][1]
    video = torch.full((5, 16, 16, 3), 0.5)
    video[:1] = previous[-1:]
    torch.testing.assert_close(p["concat_latent_image"][:, :, 1:], vae.latent_of(video))
    torch.testing.assert_close(p["concat_latent_image"][:, :, :1], vae.latent_of(torch.zeros(1, 16, 16, 3)))
    assert p["concat_mask"][0, 0, :, 0, 0].tolist() == [0.0, 0.0, 1.0]
    torch.testing.assert_close(p["pose_video_latent"], vae.latent_of(pose[8:13]))
    assert torch.equal(p["cross_attn_pose"], torch.full((1, 3, 8), 1.0))  # positive's, on both
    assert torch.equal(neg[0][1]["cross_attn_pose"], p["cross_attn_pose"])
    assert "pose_strength" not in p and "reference_strength" not in p and "clip_vision_output_pose" not in p


def test_pose_window_splits_the_entries():
    vae = FakeVideoVAE()
    pos, neg, *_ = _run(cond(1.0), cond(2.0), vae, 16, 16, 5, 1, 0, pose_video=frames(5, 16, 16),
                        pose_start_percent=0.2, pose_end_percent=0.7)
    for entries in (pos, neg):
        assert [(e[1]["start_percent"], e[1]["end_percent"], "pose_video_latent" in e[1]) for e in entries] == [
            (0.2, 0.7, True), (0.0, 0.2, False), (0.7, 1.0, False)]
        assert all("concat_latent_image" in e[1] for e in entries)


def test_bad_inputs_are_refused():
    vae = FakeVideoVAE()
    with pytest.raises(NodeInputError, match="pose_start_percent"):
        _run(cond(), cond(), vae, 16, 16, 5, 1, 0, pose_start_percent=0.8, pose_end_percent=0.5)
    with pytest.raises(NodeInputError, match="video_frame_offset"):
        _run(cond(), cond(), vae, 16, 16, 5, 1, 5, pose_video=frames(5, 16, 16))
    with pytest.raises(NodeInputError, match="length"):
        _run(cond(), cond(), vae, 16, 16, 6, 1, 0)


@pytest.fixture(scope="module")
def animate2_file(tmp_path_factory):
    from tests.fixtures.wan_files import tiny_wan_state_dict

    path = tmp_path_factory.mktemp("animate2") / "wan_animate_2.safetensors"
    state = tiny_wan_state_dict("i2v", seed=4, num_layers=1)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path),
              metadata={"config": json.dumps({"transformer": {"model_type": "animate2"}})})
    return path


def test_cache_node_and_a_sampling_run_reading_it(animate2_file):
    from comfy_core.families.wan.animate2 import CACHE_OPTION
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(animate2_file)
    assert model.model.family.name == "wan_animate2"
    with running_node("WanAnimate2Cache", "2"):
        (cached,) = wan_animate2_cache(model, "cpu", "int8")
        with pytest.raises(NodeInputError, match="dtype"):
            wan_animate2_cache(model, "cpu", "fp8")
    assert CACHE_OPTION not in (model.model_options.get("transformer_options") or {})
    cache = cached.model_options["transformer_options"][CACHE_OPTION]
    assert cache.dtype == "int8" and cache.store_device.type == "cpu"
    vae = FakeVideoVAE()
    text = [[torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(1)), {}]]
    pos, neg, latent, *_ = _run(text, [[torch.zeros(1, 4, 32), {}]], vae, 16, 16, 5, 1, 0,
                                reference_image=frames(1, 16, 16), pose_video=frames(5, 16, 16, seed=7))
    noise = torch.randn(latent["samples"].shape, generator=torch.Generator().manual_seed(0))
    args = dict(steps=3, cfg=2.0, sampler_name="euler", scheduler="simple", positive=pos, negative=neg,
                latent_image=latent["samples"], disable_pbar=True, seed=0)
    plain = sample(model, noise, **args)
    through_cache = sample(cached, noise, **args)
    # one pose slot filled on the first step, read on the two later ones (one block each); emptied at the end
    assert cache.reads == 2 and cache.slots == []
    assert through_cache.shape == plain.shape and torch.isfinite(through_cache).all()
    assert (through_cache - plain).abs().max() <= 0.05 * plain.abs().max()


def test_sampling_in_context_windows_with_the_cache(animate2_file):
    """Windows of 3 latent frames over the reference slot + 4 frames: each window gets its pose frames
    (comfy_core/families/wan/animate2.py `window_pose`) and its own cache slot, filled by a pose-only
    pass on the first step and read on the second."""
    from comfy_core.sampling.context_windows import apply_context_windows, context_handler
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(animate2_file)
    with running_node("WanAnimate2Cache", "2"):
        (cached,) = wan_animate2_cache(model, "cpu", "default")
    windowed = apply_context_windows(cached, context_handler("standard_static", "pyramid", 3, 1, dim=2))
    cache = windowed.model_options["transformer_options"]["animate2_cache"]
    text = [[torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(1)), {}]]
    pos, neg, latent, *_ = _run(text, text, FakeVideoVAE(), 16, 16, 13, 1, 0, reference_image=frames(1, 16, 16),
                                pose_video=frames(13, 16, 16, seed=7))
    assert latent["samples"].shape[2] == 5
    noise = torch.randn(latent["samples"].shape, generator=torch.Generator().manual_seed(0))
    out = sample(windowed, noise, steps=2, cfg=1.0, sampler_name="euler", scheduler="simple", positive=pos,
                 negative=neg, latent_image=latent["samples"], disable_pbar=True, seed=0)
    assert torch.isfinite(out).all() and out.shape == noise.shape
    assert cache.reads == 2 * 2  # two windows, each read on both steps (one block) after its pose-only pass
