"""Qwen-Image 2.1's family: the single-stream DiT and the one-frame RGBA VAE against diffusers'
`QwenImage21Transformer2DModel` / `AutoencoderKLQwenImage21` on tiny random weights in ComfyUI's
layout (tests/fixtures/qwen_image21_files.py), detection, the prefix K/V cache and its setting,
int8 ConvRot files, and a two-step sample from the split files."""
from __future__ import annotations

import pytest
import torch

from tests.fixtures.dit_checkpoints import save
from tests.fixtures.qwen_image21_files import (CONTEXT, LATENT_CHANNELS, diffusers_dit, diffusers_vae,
                                               dit_to_diffusers, tiny_dit_state_dict, tiny_vae_state_dict,
                                               write_dit, write_vae)

H, W = 4, 6


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen21")
    return {"dit": write_dit(root / "diffusion_models" / "qwen_image_2.1_tiny.safetensors", dtype=torch.float32),
            "vae": write_vae(root / "vae" / "qwen_image_2.1_vae_tiny.safetensors", dtype=torch.float32)}


@pytest.fixture(scope="module")
def model(files):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(files["dit"])


def _inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, LATENT_CHANNELS, H, W, generator=gen)
    context = torch.randn(1, 7, CONTEXT, generator=gen)
    ref = torch.randn(1, LATENT_CHANNELS, 2, 4, generator=gen)  # 8 tokens: 2 encoder slots of 2x2
    return x, context, ref


def _diffusers_call(reference, x, t, context, ref=None, slot=0):
    """diffusers' inputs for the same sequence: the encoder's sequence keeps one position per 2x2
    latent tokens of the reference where ComfyUI's drops it (ComfyUI's slot = text tokens before it),
    the target's positions appended."""
    batch, n_target = x.shape[0], x.shape[-2] * x.shape[-1]
    if ref is None:
        enc, shapes, latents = context, [(1, *x.shape[-2:])], x.flatten(2).transpose(1, 2)
        mask = torch.zeros(batch, context.shape[1] + n_target // 4, dtype=torch.bool)
    else:
        n_ref = ref.shape[-2] * ref.shape[-1] // 4
        enc = torch.cat([context[:, :slot], torch.zeros(batch, n_ref, context.shape[2]), context[:, slot:]], 1)
        shapes = [(1, *ref.shape[-2:]), (1, *x.shape[-2:])]
        latents = torch.cat([ref.flatten(2).transpose(1, 2), x.flatten(2).transpose(1, 2)], 1)
        mask = torch.zeros(batch, enc.shape[1] + n_target // 4, dtype=torch.bool)
        mask[:, slot:slot + n_ref] = True
    mask[:, enc.shape[1]:] = True
    out = reference(latents, enc, t, img_shapes=[shapes], img_mask=mask, return_dict=False)[0]
    return out[:, -n_target:].transpose(1, 2).reshape(x.shape)


def test_detected_as_its_own_family_with_config_from_shapes(files, model):
    from comfy_core.families.qwen_image21.dit import QwenImage21Config, QwenImage21ConfigError

    from comfy_core.families import default_registry

    assert model.model.family.name == "qwen_image21"
    single = {"model.diffusion_model." + k: v for k, v in tiny_dit_state_dict().items()}
    assert default_registry().detect(single, "q.safetensors").family.name == "qwen_image21"
    config = model.model.diffusion_model.config
    assert (config.num_layers, config.num_attention_heads, config.attention_head_dim, config.context_in_dim,
            config.mlp_ratio, config.axes_dims_rope, config.fused_mlp) == (2, 2, 16, CONTEXT, 3, (4, 6, 6), True)
    assert QwenImage21Config.detect_from_weights(dit_to_diffusers(tiny_dit_state_dict())).fused_mlp is False
    broken = tiny_dit_state_dict()
    broken["transformer_blocks.1.img_mlp.out.weight"] = torch.zeros(3, 3)
    with pytest.raises(QwenImage21ConfigError, match="transformer_blocks.1.img_mlp.out.weight"):
        QwenImage21Config.detect_from_weights(broken)


@pytest.mark.parametrize("with_reference", [False, True])
def test_network_matches_diffusers(model, with_reference):
    reference = diffusers_dit(0)
    x, context, ref = _inputs(1)
    t = torch.tensor([0.7])
    network = model.model.diffusion_model
    with torch.no_grad():
        ours = network(x, t, context, ref_latents=[ref] if with_reference else None,
                       image_slots=[3] if with_reference else None)
        theirs = _diffusers_call(reference, x, t, context, ref if with_reference else None, slot=3)
    assert (ours - theirs).abs().max() < 1e-4
    # diffusers' unfused layout computes the same
    from comfy_core.families.qwen_image21.dit import QwenImage21Config, QwenImage21Transformer

    state = dit_to_diffusers(tiny_dit_state_dict(0))
    unfused = QwenImage21Transformer.from_config(QwenImage21Config.detect_from_weights(state)).eval()
    unfused.load_state_dict(state, strict=True)
    with torch.no_grad():
        again = unfused(x, t, context, ref_latents=[ref] if with_reference else None,
                        image_slots=[3] if with_reference else None)
    assert (again - ours).abs().max() < 1e-5


def test_bad_slots_and_latents_are_typed_errors(model):
    from comfy_core.families.qwen_image21.dit import QwenImage21InputError

    network = model.model.diffusion_model
    x, context, ref = _inputs()
    with pytest.raises(QwenImage21InputError, match="image_slots"):
        network(x, torch.tensor([0.5]), context, ref_latents=[ref, ref], image_slots=[5, 2])
    with pytest.raises(QwenImage21InputError, match="image_slots"):
        network(x, torch.tensor([0.5]), context, ref_latents=[ref], image_slots=[99])
    with pytest.raises(QwenImage21InputError, match="latent"):
        network(torch.randn(1, 16, 4, 4), torch.tensor([0.5]), context)


def _block_lengths(network):
    seen = []
    hook = network.transformer_blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[1]))
    return seen, hook


def test_prefix_cache_serves_later_steps_of_a_run_exactly(model):
    network = model.model.diffusion_model
    x, context, ref = _inputs(2)
    kwargs = dict(ref_latents=[ref], image_slots=[3])
    with torch.no_grad():
        plain = [network(x * s, torch.tensor([s]), context, **kwargs) for s in (0.9, 0.4)]
        seen, hook = _block_lengths(network)
        network.begin_sampling_run()
        try:
            cached = [network(x * s, torch.tensor([s]), context, **kwargs) for s in (0.9, 0.4)]
            slots = len(network.prefix_cache.slots)
            other = network(x, torch.tensor([0.4]), context[:, :5], **kwargs)  # another prompt: its own slot
            assert len(network.prefix_cache.slots) == slots + 1
        finally:
            network.end_sampling_run()
            hook.remove()
    assert network.prefix_cache is None and not network.prefix_cache_enabled
    # first call: the prefix (7 text + 8 reference tokens) apart, then the target; the second: the target only
    assert seen[:3] == [15, H * W, H * W]
    for a, b in zip(plain, cached):
        assert (a - b).abs().max() < 1e-5
    assert other.shape == x.shape


def test_cache_setting_off_recomputes_and_int8_is_close_not_exact(model):
    from comfy_core.families.qwen_image.qwen21 import PrefixCacheSettings, with_cache_settings

    network = model.model.diffusion_model
    x, context, ref = _inputs(3)
    kwargs = dict(ref_latents=[ref], image_slots=[3])
    results = {}
    with torch.no_grad():
        plain = network(x, torch.tensor([0.5]), context, **kwargs)
        for dtype, device in (("default", "off"), ("int8", "cpu"), ("int4", "auto")):
            options = with_cache_settings({}, PrefixCacheSettings(device, dtype))
            network.begin_sampling_run()
            try:
                seen, hook = _block_lengths(network)
                results[dtype] = [network(x, torch.tensor([0.5]), context, transformer_options=options, **kwargs)
                                  for _ in range(2)]
                hook.remove()
                kept = network.prefix_cache
            finally:
                network.end_sampling_run()
            if device == "off":
                assert kept is None and seen == [H * W + 15] * 2
            else:
                stored = kept.slots[0].kv[0][0][0]
                assert stored.dtype == (torch.int8 if dtype == "int8" else torch.uint8)
    assert torch.equal(results["default"][0], plain)
    int8_error = (results["int8"][1] - plain).abs().max()
    int4_error = (results["int4"][1] - plain).abs().max()
    assert 0 < int8_error < 0.05 and int8_error < int4_error < 0.5


def test_hooks_and_block_patches_turn_the_cache_off(model):
    network = model.model.diffusion_model
    x, context, ref = _inputs(4)
    calls = []

    def patch(args):
        calls.append(args["img"].shape[1])
        return {"img": args["img"]}

    options = {"patches": {"single_block": [patch]}}
    with torch.no_grad():
        network.begin_sampling_run()
        try:
            for _ in range(2):
                network(x, torch.tensor([0.5]), context, ref_latents=[ref], image_slots=[3],
                        transformer_options=options)
        finally:
            network.end_sampling_run()
    assert calls == [H * W + 15] * 4  # 2 blocks x 2 calls, always the whole sequence
    # a run with weight hooks (their patches may change between steps) recomputes the prefix too
    from comfy_core.families.qwen_image21.dit import HOOK_RUN_OPTION
    from comfy_core.hooks.sampling import HOOK_RUN_OPTION as HOOKS_OPTION

    assert HOOK_RUN_OPTION == HOOKS_OPTION
    seen, hook = _block_lengths(network)
    with torch.no_grad():
        network.begin_sampling_run()
        try:
            for _ in range(2):
                network(x, torch.tensor([0.5]), context, ref_latents=[ref], image_slots=[3],
                        transformer_options={HOOK_RUN_OPTION: object()})
        finally:
            network.end_sampling_run()
            hook.remove()
    assert seen == [H * W + 15] * 2


def test_patcher_run_lifecycle_starts_and_drops_the_cache(model):
    network = model.model.diffusion_model
    model.pre_run()
    assert network.prefix_cache_enabled
    model.cleanup()
    assert not network.prefix_cache_enabled and network.prefix_cache is None


def test_conditions_carry_slots_and_references_in_model_space(model):
    latent = torch.randn(1, LATENT_CHANNELS, 2, 2)
    out = model.model.extra_inputs(reference_latents=[latent], image_slots=(2, 5))
    assert out["image_slots"] == [2, 5]
    assert torch.allclose(out["ref_latents"][0], model.model.latent_format.process_in(latent))
    fmt = model.model.latent_format
    assert fmt.channels == 64 and torch.allclose(fmt.process_out(fmt.process_in(latent)), latent, atol=1e-5)


def test_int8_convrot_file_computes_like_its_dequantised_weights(tmp_path):
    from safetensors.torch import load_file

    from comfy_core.split.diffusion_model import load_diffusion_model

    path = write_dit(tmp_path / "q" / "qwen_image_2.1_int8_convrot.safetensors", seed=5, int8_convrot=True)
    assert load_file(str(path))["transformer_blocks.0.attn.to_q.weight"].dtype == torch.int8
    truth = load_file(str(path.with_name(path.stem + "_true.safetensors")))
    quantised, plain = load_diffusion_model(path), load_diffusion_model(save(truth, tmp_path / "f" / "f.safetensors"))
    assert quantised.model.diffusion_model.transformer_blocks[0].attn.to_q.weight.dtype == torch.int8
    x, context, ref = _inputs(5)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), context, ref_latents=[ref], image_slots=[3])
                for m in (quantised, plain))
    assert (a.float() - b.float()).abs().max() < 2e-2


def test_vae_matches_diffusers_and_loads_as_an_rgba_image_vae(files):
    from comfy_core.loading import load_vae

    vae = load_vae(files["vae"])
    assert vae.latent_channels == 64 and vae.latent_dim == 2 and vae.downscale_ratio == 16
    reference = diffusers_vae(0)
    image = torch.rand(1, 32, 48, 4, generator=torch.Generator().manual_seed(0))
    latent = vae.encode(image)
    with torch.no_grad():
        mean = reference.encode(image.movedim(-1, 1).unsqueeze(2) * 2 - 1).latent_dist.mean[:, :, 0]
        pixels = reference.decode(mean.unsqueeze(2)).sample[:, :, 0]
    assert latent.shape == (1, 64, 2, 3) and (latent - mean).abs().max() < 1e-4
    decoded = vae.decode(latent)
    assert decoded.shape == (1, 32, 48, 4)
    assert (decoded - ((pixels + 1) / 2).clamp(0, 1).movedim(1, -1)).abs().max() < 1e-4
    opaque = torch.cat([image[..., :3], torch.ones_like(image[..., :1])], dim=-1)
    assert torch.equal(vae.encode(image[..., :3]), vae.encode(opaque))  # RGB gets an opaque alpha


def test_split_files_sample_two_steps(model, files):
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 6, CONTEXT, generator=gen), {"reference_latents": [torch.randn(1, 64, 2, 2)],
                                                             "image_slots": [2]}]]
    negative = [[torch.randn(1, 3, CONTEXT, generator=gen), {}]]
    noise = torch.randn(1, 64, 2, 3, generator=torch.Generator().manual_seed(0))
    seen, hook = _block_lengths(model.model.diffusion_model)
    try:
        out = sample(model, noise, 2, 3.0, "euler", "simple", positive, negative, torch.zeros(1, 64, 2, 3))
    finally:
        hook.remove()
    assert out.shape == (1, 64, 2, 3) and torch.isfinite(out).all()
    # the run's prefix cache: each prefix (6 text + 4 reference tokens; 3 text) once, then the 6 target tokens
    assert sorted(seen) == [3, 6, 6, 6, 6, 10]
    assert model.model.model_sampling.shift == pytest.approx(0.69)


def test_whole_sample_matches_a_diffusers_euler_loop_with_its_kv_cache(model):
    """Three euler steps (CFG 1, an edit: a reference latent at slot 3) from the same noise and sigmas:
    our sampler (the run's prefix cache on) against diffusers' transformer stepped by its
    FlowMatchEulerDiscreteScheduler with its own K/V cache ("extract", then "cached")."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache

    from comfy_core.sampling.ksampler import sample

    reference = diffusers_dit(0)
    fmt = model.model.latent_format
    x, context, ref_raw = _inputs(6)
    noise = x
    sigmas = [1.0, 2 / 3, 1 / 3]
    positive = [[context, {"reference_latents": [ref_raw], "image_slots": [3]}]]
    ours = sample(model, noise, 3, 1.0, "euler", "simple", positive, [[context[:, :2], {}]], torch.zeros_like(noise),
                  sigmas=torch.tensor(sigmas + [0.0]))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    scheduler.set_timesteps(sigmas=sigmas)
    latents, ref = noise.clone(), fmt.process_in(ref_raw)
    cache = QwenImage21KVCache(len(reference.transformer_blocks))
    n_ref, n_target = ref.shape[-2] * ref.shape[-1] // 4, H * W
    enc = torch.cat([context[:, :3], torch.zeros(1, n_ref, CONTEXT), context[:, 3:]], 1)
    mask = torch.zeros(1, enc.shape[1] + n_target // 4, dtype=torch.bool)
    mask[:, 3:3 + n_ref] = True
    mask[:, enc.shape[1]:] = True
    with torch.no_grad():
        for i, t in enumerate(scheduler.timesteps):
            hidden = torch.cat([ref.flatten(2).transpose(1, 2), latents.flatten(2).transpose(1, 2)], 1)
            v = reference(hidden, enc, (t / 1000).reshape(1), img_shapes=[[(1, 2, 4), (1, H, W)]], img_mask=mask,
                          kv_cache=cache, kv_cache_mode="extract" if i == 0 else "cached", return_dict=False)[0]
            v = v[:, -n_target:].transpose(1, 2).reshape(latents.shape)
            latents = scheduler.step(v, t, latents, return_dict=False)[0]
    theirs = fmt.process_out(latents)
    assert (ours - theirs).abs().max() < 1e-4
    assert (ours - fmt.process_out(noise)).abs().max() > 1e-2  # the model moved the sample


def test_template_writers_fit_the_encoder_and_the_enhancer_stand_in_is_refused(tmp_path):
    """The templates' DiT takes the tiny Qwen3-VL's width; the prompt enhancer (behind the templates'
    lazy switch, off as saved) is written as a file CLIPLoader refuses with a typed error."""
    from comfy_core.split.clip_types import ClipFilesError
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.qwen3vl_files import TEXT_WIDTH
    from tests.fixtures.template_models_qwen21 import WRITERS_QWEN21, file_kind_qwen21

    unet = tmp_path / "qwen_image_2.1_int8_convrot.safetensors"
    WRITERS_QWEN21[file_kind_qwen21("diffusion_models", unet.name)](unet)
    network = load_diffusion_model(unet).model.diffusion_model
    assert network.config.context_in_dim == TEXT_WIDTH
    assert network.transformer_blocks[0].img_mlp.gate_up.weight.dtype == torch.int8
    enhancer = tmp_path / "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors"
    WRITERS_QWEN21[file_kind_qwen21("text_encoders", enhancer.name)](enhancer)
    with pytest.raises(ClipFilesError, match="not a CLIP text encoder"):
        load_text_encoders([enhancer], "stable_diffusion")
