"""The Wan 2.1 / 2.2 video DiT (comfy_core/families/wan/dit.py): numerics against diffusers'
`WanTransformer3DModel` on the same tiny random weights (t2v, i2v with the CLIP-image embedding,
first-last-frame, TI2V-5B with per-frame timesteps), the three file layouts loading to the same
module, detection of every variant from names and shapes (and refusal of malformed files), the
Wan conditioning keys, KSampler / KSamplerAdvanced on 5-D latents (directly and through the
executor), block replacement, and Wan LoRA files in their key spellings."""
from __future__ import annotations

import asyncio

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.errors import UnknownFamilyError
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.families.wan.keys import (WanLayoutError, convert_diffusers_state_dict, convert_original_state_dict,
                                          is_diffusers_wan, original_to_diffusers_name)
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.wan_files import (SINGLE_FILE_PREFIX, VARIANTS, diffusers_wan_kwargs, tiny_wan_config,
                                      tiny_wan_state_dict, to_diffusers_layout, write_tiny_wan)

diffusers = pytest.importorskip("diffusers")

FAMILY_OF = {"t2v": "wan21_t2v", "i2v": "wan21_i2v", "flf2v": "wan21_i2v", "fun_control": "wan21_fun_control",
             "fun_inpaint": "wan21_i2v", "a14b_i2v": "wan22_i2v", "ti2v": "wan22_ti2v", "fun_control_22": "wan22_i2v",
             "vace": "wan21_vace", "camera": "wan21_camera", "camera_22": "wan22_camera",
             "s2v": "wan22_s2v", "humo": "wan21_humo", "humo_small": "wan21_humo"}
TOLERANCE = 1e-4  # float32, other operation order than diffusers'


def _module(variant: str, seed: int = 0) -> WanModel:
    state = tiny_wan_state_dict(variant, seed=seed)
    model = WanModel.from_config(WanConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _reference(variant: str, seed: int = 0) -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    model = WanTransformer3DModel(**diffusers_wan_kwargs(variant))
    model.load_state_dict(to_diffusers_layout(tiny_wan_state_dict(variant, seed=seed)), strict=True)
    return model.eval()


def _inputs(config: WanConfig, frames: int = 3, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, config.in_dim, frames, 4, 6, generator=generator)
    # diffusers takes the image tokens as whatever precedes the last 512 text tokens
    context = torch.randn(1, 512, config.text_dim, generator=generator)
    return x, context


@pytest.mark.parametrize("variant", ["t2v", "i2v", "flf2v", "ti2v", "a14b_i2v"])
def test_forward_matches_diffusers(variant):
    ours, reference = _module(variant), _reference(variant)
    x, context = _inputs(ours.config)
    kwargs, reference_kwargs = {}, {}
    if ours.config.has_image_embedding:
        images = 2 if variant == "flf2v" else 1
        clip = torch.randn(1, 257 * images, ours.config.image_dim, generator=torch.Generator().manual_seed(2))
        kwargs["clip_fea"] = clip
        reference_kwargs["encoder_hidden_states_image"] = clip.view(images, 257, -1)
    t = torch.tensor([700.0])
    with torch.no_grad():
        out = ours(x, t, context, **kwargs)
        expected = reference(x, t, context, return_dict=False, **reference_kwargs)[0]
    assert out.shape == (1, ours.config.out_dim, 3, 4, 6)
    torch.testing.assert_close(out, expected, atol=TOLERANCE, rtol=TOLERANCE)


def test_ti2v_denoise_mask_gives_per_frame_timesteps_as_diffusers_per_token():
    ours, reference = _module("ti2v"), _reference("ti2v")
    x, context = _inputs(ours.config)
    mask = torch.ones(1, 48, 3, 4, 6)
    mask[:, :, 0] = 0.0  # the clean first frame (Wan22ImageToVideoLatent)
    t = torch.tensor([700.0])
    per_token = (mask.mean(dim=(1, 3, 4)) * t).repeat_interleave(2 * 3, dim=1)  # [1, T * h' * w']
    with torch.no_grad():
        out = ours(x, t, context, denoise_mask=mask)
        expected = reference(x, per_token, context, return_dict=False)[0]
        plain = ours(x, t, context)
    torch.testing.assert_close(out, expected, atol=TOLERANCE, rtol=TOLERANCE)
    assert (out - plain).abs().max() > 1e-3  # the first frame's timestep 0 changes the result


def test_vace_matches_diffusers_vace_transformer():
    from diffusers import WanVACETransformer3DModel

    ours = _module("vace")
    kwargs = diffusers_wan_kwargs("vace")
    reference = WanVACETransformer3DModel(**kwargs, vace_layers=[0], vace_in_channels=96).eval()
    reference.load_state_dict(to_diffusers_layout(tiny_wan_state_dict("vace")), strict=True)
    x, context = _inputs(ours.config)
    hints = torch.randn(1, 96, 3, 4, 6, generator=torch.Generator().manual_seed(3))
    t = torch.tensor([500.0])
    with torch.no_grad():
        out = ours(x, t, context, vace_context=hints.unsqueeze(1), vace_strength=[0.7])
        expected = reference(x, t, context, control_hidden_states=hints, control_hidden_states_scale=torch.tensor([0.7]),
                             return_dict=False)[0]
    torch.testing.assert_close(out, expected, atol=TOLERANCE, rtol=TOLERANCE)


def test_key_map_round_trips_and_agrees_with_diffusers_converter():
    for variant in ("t2v", "i2v", "flf2v", "ti2v", "vace"):
        state = tiny_wan_state_dict(variant)
        converted = to_diffusers_layout(state)  # diffusers' own converter
        assert is_diffusers_wan(converted) and not is_diffusers_wan(state)
        assert set(convert_original_state_dict(state)) == set(converted)
        back = convert_diffusers_state_dict(converted)
        assert set(back) == set(state)
        # each original tensor came back from the diffusers tensor of the name our map gives it
        assert all(back[k] is converted[original_to_diffusers_name(k)] for k in back)
        assert all(torch.equal(back[k], state[k]) for k in state)
    with pytest.raises(WanLayoutError, match="not_a_wan_tensor"):
        convert_diffusers_state_dict({**to_diffusers_layout(tiny_wan_state_dict()), "not_a_wan_tensor": torch.ones(1)})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_detection_of_every_variant(variant):
    state = tiny_wan_state_dict(variant)
    config = WanConfig.detect_from_weights(state)
    expected = tiny_wan_config(variant)
    assert {k: getattr(config, k) for k in expected} == expected
    header = {k: torch.empty(v.shape, device="meta") for k, v in state.items()}  # names and shapes only
    assert WanConfig.detect_from_weights(header) == config
    family = default_registry().detect_diffusion_model({SINGLE_FILE_PREFIX + k: v for k, v in header.items()}).family
    assert family.name == FAMILY_OF[variant]


def test_detected_config_is_comfyuis_unet_config():
    config = WanConfig.detect_from_weights(tiny_wan_state_dict("flf2v"))
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "wan2.1" and unet["model_type"] == "i2v" and unet["in_dim"] == 36
    assert unet["flf_pos_embed_token_number"] == 514 and unet["num_heads"] == 2 and "vace_layers" not in unet
    vace = WanConfig.detect_from_weights(tiny_wan_state_dict("vace")).comfy_unet_config()
    assert (vace["model_type"], vace["vace_layers"], vace["vace_in_dim"]) == ("vace", 1, 96)


def test_malformed_files_are_refused_naming_the_key():
    state = tiny_wan_state_dict("t2v")
    missing = {k: v for k, v in state.items() if k != "blocks.1.ffn.2.weight"}
    with pytest.raises(WanConfigError, match=r"blocks\.1\.ffn\.2\.weight"):
        WanConfig.detect_from_weights(missing)
    wrong = dict(state, **{"blocks.0.cross_attn.k.weight": torch.zeros(256, 128)})
    with pytest.raises(WanConfigError, match=r"blocks\.0\.cross_attn\.k\.weight"):
        WanConfig.detect_from_weights(wrong)
    gap = {k.replace("blocks.1.", "blocks.2."): v for k, v in state.items()}
    with pytest.raises(WanConfigError, match=r"none numbered \[1\]"):
        WanConfig.detect_from_weights(gap)
    odd = dict(state, **{"head.modulation": torch.zeros(1, 2, 200)})
    with pytest.raises(WanConfigError, match="128-channel heads"):
        WanConfig.detect_from_weights(odd)
    # Wan 2.2 Animate's marker without the rest of its modules (a t2v file with one stray tensor)
    animate = dict(state, **{"face_adapter.fuser_blocks.0.k_norm.weight": torch.zeros(1)})
    with pytest.raises(WanConfigError, match="pose_patch_embedding"):
        WanConfig.detect_from_weights(animate)
    # an i2v-style model (image embedding) with an input width no Wan family takes
    odd_i2v = tiny_wan_state_dict("i2v", in_dim=20)
    with pytest.raises(UnknownFamilyError):
        default_registry().detect_diffusion_model({SINGLE_FILE_PREFIX + k: v for k, v in odd_i2v.items()})


def test_bad_inputs_are_typed_errors():
    model = _module("t2v")
    x, context = _inputs(model.config)
    with pytest.raises(ValueError, match="frames"):
        model(x[:, :, 0], torch.tensor([1.0]), context)
    with pytest.raises(ValueError, match="text conditioning is 16 wide"):
        model(x, torch.tensor([1.0]), context[..., :16])
    with pytest.raises(ValueError, match="vace_context"):
        _module("vace")(x, torch.tensor([1.0]), context)


@pytest.mark.parametrize("variant", ["t2v", "i2v", "flf2v", "ti2v"])
def test_three_layouts_load_to_the_same_module(tmp_path, variant):
    loaded = []
    for layout in ("original", "prefixed", "diffusers"):
        patcher = load_diffusion_model(write_tiny_wan(tmp_path / f"{layout}.safetensors", variant, layout))
        assert patcher.model.family.name == FAMILY_OF[variant]
        loaded.append(patcher.model.diffusion_model)
    first = loaded[0].state_dict()
    assert first.keys() == set(tiny_wan_state_dict(variant))
    for other in loaded[1:]:
        assert type(other) is type(loaded[0]) and other.config == loaded[0].config
        state = other.state_dict()
        assert state.keys() == first.keys() and all(torch.equal(state[k], first[k]) for k in first)


class _Model:
    """The parts of a DiffusionModel the Wan conditions read."""

    def __init__(self, variant: str) -> None:
        from comfy_core.families.wan.latent_format import wan21_latent_format, wan22_latent_format

        self.diffusion_model = _module(variant)
        self.latent_format = wan22_latent_format() if variant == "ti2v" else wan21_latent_format()

    def process_latent_in(self, latent: torch.Tensor) -> torch.Tensor:
        return self.latent_format.process_in(latent)


def test_i2v_concat_is_mask_then_image_in_model_space():
    model, conditions = _Model("i2v"), WanConditions("wan21", image_to_video=True)
    noise = torch.zeros(1, 16, 3, 4, 6)
    image = torch.randn(1, 16, 3, 8, 12)  # twice the size: resized per frame
    mask = torch.ones(1, 1, 3, 8, 12)
    mask[:, :, 0] = 0.0  # WanImageToVideo: the first frame given
    out = conditions.concat_cond(model, noise=noise, concat_latent_image=image, concat_mask=mask)
    assert out.shape == (1, 20, 3, 4, 6)
    assert torch.equal(out[:, :4, 0], torch.ones(1, 4, 4, 6)) and torch.equal(out[:, :4, 1:], torch.zeros(1, 4, 2, 4, 6))
    resized = torch.nn.functional.interpolate(image.movedim(2, 1).reshape(3, 16, 8, 12), size=(4, 6), mode="bilinear")
    expected = model.process_latent_in(resized.reshape(1, 3, 16, 4, 6).movedim(1, 2))
    torch.testing.assert_close(out[:, 4:], expected)
    # no image on an i2v model: mask and image zeros (ComfyUI's zero image)
    empty = conditions.concat_cond(model, noise=noise)
    assert empty.shape == (1, 20, 3, 4, 6) and not empty.any()
    # the index puts the mask after that many image channels
    indexed = conditions.concat_cond(model, noise=noise, concat_latent_image=image, concat_mask=mask,
                                     concat_mask_index=16)
    torch.testing.assert_close(indexed[:, 16:], out[:, :4])
    assert conditions.concat_cond(_Model("t2v"), noise=noise) is None


def test_extra_conds_consume_comfyuis_keys():
    model = _Model("vace")
    noise = torch.zeros(1, 16, 3, 4, 6)

    class ClipVisionOutput:
        penultimate_hidden_states = torch.ones(1, 257, 48)

    out = WanConditions("vace").extra_conds(model, noise=noise, clip_vision_output=ClipVisionOutput(),
                                            vace_strength=[0.5])
    assert out["clip_fea"] is ClipVisionOutput.penultimate_hidden_states
    assert out["vace_context"].shape == (1, 1, 96, 3, 4, 6) and out["vace_strength"] == [0.5]
    zeros = model.process_latent_in(torch.zeros(1, 16, 3, 4, 6))
    torch.testing.assert_close(out["vace_context"][0, 0, :16], zeros[0])  # absent frames: zeros in model space
    assert torch.equal(out["vace_context"][0, 0, 32:], torch.ones(64, 3, 4, 6))  # absent mask: ones
    references = WanConditions().extra_conds(model, noise=noise, reference_latents=[torch.ones(1, 16, 1, 4, 6)])
    assert references["reference_latent"].shape == (1, 16, 4, 6)
    mask = torch.ones(1, 48, 3, 4, 6)
    assert WanConditions("wan22", True).extra_conds(_Model("ti2v"), noise=noise, denoise_mask=mask)["denoise_mask"] is mask
    camera = torch.zeros(1, 24, 3, 32, 48)
    assert WanConditions("camera").extra_conds(model, noise=noise, camera_conditions=camera)["camera_conditions"] is camera


def _conds(width: int = 32) -> tuple[list, list]:
    generator = torch.Generator().manual_seed(5)
    return [[torch.randn(1, 8, width, generator=generator), {}]], [[torch.zeros(1, 8, width), {}]]


def test_ksampler_and_two_expert_ksampler_advanced_on_5d_latents(tmp_path):
    from nodes.sampling import ksampler, ksampler_advanced

    model = load_diffusion_model(write_tiny_wan(tmp_path / "t2v.safetensors", "t2v"))
    positive, negative = _conds()
    latent = {"samples": torch.zeros(1, 16, 2, 4, 6)}
    out = ksampler(model, 3, 4, 5.0, "euler", "simple", positive, negative, latent)[0]["samples"]
    assert out.shape == (1, 16, 2, 4, 6) and torch.isfinite(out).all() and out.abs().mean() > 0.1
    # ComfyUI's A14B templates: the high-noise expert for steps 0-2 (leftover noise kept), the
    # low-noise expert from step 2 without new noise; with one model as both, the full run.
    high = ksampler_advanced(model, "enable", 3, 4, 5.0, "euler", "simple", positive, negative, latent, 0, 2,
                             "enable")[0]
    low = ksampler_advanced(model, "disable", 3, 4, 5.0, "euler", "simple", positive, negative, high, 2, 10000,
                            "disable")[0]["samples"]
    torch.testing.assert_close(low, out, atol=1e-4, rtol=1e-4)
    assert (high["samples"] - out).abs().max() > 1.0  # the first expert left noise in
    other = load_diffusion_model(write_tiny_wan(tmp_path / "low.safetensors", "t2v", seed=9))
    switched = ksampler_advanced(other, "disable", 3, 4, 5.0, "euler", "simple", positive, negative, high, 2, 10000,
                                 "disable")[0]["samples"]
    assert (switched - out).abs().max() > 1e-3  # the second expert's weights are used
    # An empty 4-D latent gets its frame axis, as ComfyUI's fix_empty_latent_channels gives it.
    flat = ksampler(model, 3, 1, 5.0, "euler", "simple", positive, negative, {"samples": torch.zeros(1, 16, 4, 6)})
    assert flat[0]["samples"].shape == (1, 16, 1, 4, 6)


def test_ti2v_noise_mask_keeps_the_first_frame_clean(tmp_path):
    from nodes.sampling import ksampler

    model = load_diffusion_model(write_tiny_wan(tmp_path / "ti2v.safetensors", "ti2v"))
    positive, negative = _conds()
    latent = torch.zeros(1, 48, 3, 4, 6)
    latent[:, :, 0] = torch.randn(1, 48, 4, 6, generator=torch.Generator().manual_seed(4))
    mask = torch.ones(1, 1, 3, 4, 6)
    mask[:, :, 0] = 0.0  # Wan22ImageToVideoLatent's noise mask
    out = ksampler(model, 1, 3, 5.0, "euler", "simple", positive, negative,
                   {"samples": latent, "noise_mask": mask})[0]["samples"]
    torch.testing.assert_close(out[:, :, 0], latent[:, :, 0], atol=1e-5, rtol=1e-5)
    assert out[:, :, 1:].abs().mean() > 0.1


def test_i2v_sampling_with_wan_conditioning_keys(tmp_path):
    from nodes.sampling import ksampler

    model = load_diffusion_model(write_tiny_wan(tmp_path / "i2v.safetensors", "i2v"))
    positive, negative = _conds()

    class ClipVisionOutput:
        penultimate_hidden_states = torch.randn(1, 257, 48, generator=torch.Generator().manual_seed(6))

    image = torch.randn(1, 16, 2, 4, 6, generator=torch.Generator().manual_seed(7))
    mask = torch.ones(1, 1, 2, 4, 6)
    mask[:, :, 0] = 0.0
    keys = {"concat_latent_image": image, "concat_mask": mask, "clip_vision_output": ClipVisionOutput()}
    conditioned = [[c, dict(keys)] for c, _ in positive], [[c, dict(keys)] for c, _ in negative]
    latent = {"samples": torch.zeros(1, 16, 2, 4, 6)}
    out = ksampler(model, 2, 2, 4.0, "euler", "simple", *conditioned, latent)[0]["samples"]
    plain = ksampler(model, 2, 2, 4.0, "euler", "simple", positive, negative, latent)[0]["samples"]
    assert out.shape == (1, 16, 2, 4, 6) and (out - plain).abs().max() > 1e-3


def test_double_block_replacement_and_skip_layer_guidance_skip():
    model = _module("t2v")
    x, context = _inputs(model.config)
    seen = []

    def replace(args, extra):
        seen.append((args["transformer_options"]["block_index"], args["vec"].shape, args["img"].shape))
        return extra["original_block"](args)

    from comfy_core.model_patches.skip_layer_guidance import skip_block as skip  # SkipLayerGuidanceDiT's

    t = torch.tensor([400.0])
    with torch.no_grad():
        plain = model(x, t, context)
        same = model(x, t, context, transformer_options={"patches_replace": {"dit": {("double_block", 1): replace}}})
        skipped = model(x, t, context, transformer_options={"patches_replace": {"dit": {("double_block", 0): skip}}})
    assert torch.equal(plain, same) and seen == [(1, (1, 6, 256), (1, 3 * 2 * 3, 256))]
    assert (plain - skipped).abs().max() > 1e-3


def _lora(layer: str, rank: int = 2, width: int = 256, style: str = "kohya") -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(8)
    down, up = torch.randn(rank, width, generator=generator), torch.randn(width, rank, generator=generator)
    if style == "peft":
        return {f"{layer}.lora_A.weight": down, f"{layer}.lora_B.weight": up}
    return {f"{layer}.lora_down.weight": down, f"{layer}.lora_up.weight": up, f"{layer}.alpha": torch.tensor(float(rank))}


@pytest.mark.parametrize("layer,style", [
    ("diffusion_model.blocks.0.self_attn.q", "kohya"),  # ComfyUI / lightx2v
    ("lora_unet_blocks_0_self_attn_q", "kohya"),  # musubi-tuner
    ("lora_unet__blocks_0_self_attn_q", "kohya"),  # diffusion-pipe / VideoX-Fun
    ("transformer.blocks.0.attn1.to_q", "peft"),  # diffusers / PEFT
])
def test_wan_lora_changes_the_output_and_unpatches(tmp_path, layer, style):
    from comfy_core.lora import load_lora_for_models

    patcher = load_diffusion_model(write_tiny_wan(tmp_path / "t2v.safetensors", "t2v"))
    network = patcher.model.diffusion_model
    before = network.blocks[0].self_attn.q.weight.detach().clone()
    tensors = _lora(layer, style=style)
    lora_model, _, _ = load_lora_for_models(patcher, None, tensors, 0.5, 0.0)
    down = next(v for k, v in tensors.items() if "down" in k or "lora_A" in k)
    up = next(v for k, v in tensors.items() if "up" in k or "lora_B" in k)
    x, context = _inputs(network.config, frames=2)
    with torch.no_grad():
        plain = network(x, torch.tensor([300.0]), context[:, :8])
        with lora_model.applied() as dm:
            patched = dm.diffusion_model.blocks[0].self_attn.q.weight.detach().clone()
            changed = dm.diffusion_model(x, torch.tensor([300.0]), context[:, :8])
    torch.testing.assert_close(patched, before + 0.5 * up @ down, atol=1e-4, rtol=1e-4)
    assert (changed - plain).abs().max() > 1e-3
    assert torch.equal(network.blocks[0].self_attn.q.weight, before)


CAPTURED: dict[str, object] = {}


def _capture_node():
    from graph.native import Input, node

    @node("TestCaptureWanLatent", inputs=[Input("samples", "LATENT")], output_node=True)
    def capture(samples):
        CAPTURED["samples"] = samples["samples"]
        return {}

    return capture


def test_ksampler_through_the_executor(tmp_path):
    """UNETLoader (a tiny Wan 2.1 t2v file), CLIPLoader type "wan" (a tiny umT5), CLIPTextEncode,
    EmptyHunyuanLatentVideo and KSampler through the graph executor."""
    from graph.executor import Executor
    from graph.registry import Registry
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes
    from nodes.environment import Environment
    from tests.fixtures.umt5_files import write_umt5_file

    models = tmp_path / "models"
    write_tiny_wan(models / "diffusion_models" / "wan_tiny.safetensors", "t2v")
    write_umt5_file(models / "text_encoders" / "umt5_tiny.safetensors")
    env = Environment.rooted_at(tmp_path, mmap=False)
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(_capture_node())
    prompt = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "wan_tiny.safetensors", "weight_dtype": "default"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "umt5_tiny.safetensors", "type": "wan",
                                                     "device": "default"}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat walks in the park", "clip": ["2", 0]}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["2", 0]}},
        "5": {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 48, "height": 32, "length": 5,
                                                                  "batch_size": 1}},
        "6": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 3, "steps": 2, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "simple",
                                                   "positive": ["3", 0], "negative": ["4", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "7": {"class_type": "TestCaptureWanLatent", "inputs": {"samples": ["6", 0]}},
    }

    async def run():
        checked = await validate_prompt(prompt, registry, env=env)
        assert checked.ok, checked.node_errors
        return await Executor(registry, env=env).execute(prompt, "wan", outputs=checked.outputs)

    outcome = asyncio.run(run())
    assert outcome.status == "success", outcome.error
    samples = CAPTURED.pop("samples")
    # 48x32 pixels, 5 frames -> 16 channels, (5 - 1) // 4 + 1 = 2 frames, 4 x 6
    assert samples.shape == (1, 16, 2, 4, 6) and torch.isfinite(samples).all() and samples.abs().mean() > 0.1


def test_camera_and_reference_inputs_reach_the_network():
    camera = _module("camera_22")
    x, context = _inputs(camera.config)
    t = torch.tensor([600.0])
    plucker = torch.randn(1, 24, 3, 32, 48, generator=torch.Generator().manual_seed(9))  # pixel size: 8x the latent
    with torch.no_grad():
        plain = camera(x, t, context)
        steered = camera(x, t, context, camera_conditions=plucker)
    assert steered.shape == plain.shape and (steered - plain).abs().max() > 1e-3
    fun = _module("fun_control_22")
    x, context = _inputs(fun.config)
    reference = torch.randn(1, 16, 4, 6, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        plain = fun(x, t, context)
        referenced = fun(x, t, context, reference_latent=reference)
    assert referenced.shape == plain.shape == (1, 16, 3, 4, 6) and (referenced - plain).abs().max() > 1e-3
