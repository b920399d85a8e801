"""HunyuanVideo 1.0's DiT (comfy_core/families/hunyuan_video): numerics against diffusers'
`HunyuanVideoTransformer3DModel` on tiny random weights (converted by diffusers' own single-file
converter), detection from ComfyUI's (Tencent's) key names, loading through UNETLoader's loader, the
conditioning ComfyUI's `model_base.HunyuanVideo*` gives the network."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.hunyuan_video.conditions import HunyuanVideoConditions
from comfy_core.families.hunyuan_video.dit import HunyuanVideoConfig, HunyuanVideoConfigError, HunyuanVideoTransformer
from comfy_core.families.hunyuan_video.keys import convert_diffusers_state_dict
from tests.fixtures.template_models_hunyuan_video import tiny_hunyuan_video_state_dict

WIDTH = 64


def _network(state: dict) -> HunyuanVideoTransformer:
    network = HunyuanVideoTransformer(HunyuanVideoConfig.detect_from_weights(state))
    network.load_state_dict(state, strict=True)
    return network.eval()


def _to_diffusers(state: dict) -> dict:
    """diffusers' converter, after splitting each single block's `linear1` (its converter assumes
    the released 3072 width there) into q / k / v / MLP as it would."""
    single_file = pytest.importorskip("diffusers.loaders.single_file_utils")
    converter = single_file.convert_hunyuan_video_transformer_to_diffusers
    state = dict(state)
    for name in [n for n in state if ".linear1." in n]:
        fused = state.pop(name)
        head, suffix = name.split(".linear1.")
        parts = fused.split([WIDTH, WIDTH, WIDTH, fused.shape[0] - 3 * WIDTH], dim=0)
        for part, tensor in zip(("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"), parts):
            state[f"{head}.{part}.{suffix}"] = tensor
    return converter(state)


def _reference(state: dict, **config):
    transformers = pytest.importorskip("diffusers")
    network = HunyuanVideoConfig.detect_from_weights(state)
    reference = transformers.HunyuanVideoTransformer3DModel(
        in_channels=network.in_channels, out_channels=16, num_attention_heads=4, attention_head_dim=16, num_layers=2,
        num_single_layers=2, num_refiner_layers=2, patch_size=2, patch_size_t=1, guidance_embeds=network.guidance_embed,
        text_embed_dim=32, pooled_projection_dim=32, rope_axes_dim=network.axes_dim, **config)
    reference.load_state_dict(_to_diffusers(state), strict=True)
    return reference.eval()


def _inputs(seed: int = 0, channels: int = 16):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, channels, 3, 8, 12, generator=gen), torch.randn(1, 7, 32, generator=gen),
            torch.randn(1, 32, generator=gen))


def test_text_to_video_matches_diffusers():
    state = tiny_hunyuan_video_state_dict(seed=1)
    ours, reference = _network(state), _reference(state)
    x, context, pooled = _inputs()
    t = torch.tensor([700.0])  # ComfyUI: sigma x 1000; diffusers' pipeline: the same timestep
    with torch.no_grad():
        got = ours(x, t, context, y=pooled, guidance=torch.tensor([6.0]))
        want = reference(x, t, context, torch.ones(1, 7, dtype=torch.long), pooled, guidance=torch.tensor([6000.0]),
                         return_dict=False)[0]  # diffusers' pipeline passes guidance x 1000
        other = ours(x, t, context, y=pooled, guidance=torch.tensor([1.0]))
    assert got.shape == x.shape
    assert torch.allclose(got, want, atol=1e-4, rtol=0)
    assert not torch.allclose(got, other, atol=1e-3)  # the guidance embedding counts


def test_token_replace_matches_diffusers_but_for_comfyuis_last_layer():
    """HunyuanImageToVideo "v2 (replace)": the first latent frame's tokens are modulated by
    `time_in(0) + vector_in(y)`, as diffusers' `token_replace`; ComfyUI also gives the final layer
    that per-token modulation (diffusers: the usual vector), so only frame 0's output differs."""
    state = tiny_hunyuan_video_state_dict(seed=2, guidance=False)
    ours, reference = _network(state), _reference(state, image_condition_type="token_replace")
    x, context, pooled = _inputs(1)
    t = torch.tensor([400.0])
    with torch.no_grad():
        got = ours(x, t, context, y=pooled, guiding_frame_index=torch.tensor([0.0]))
        want = reference(x, t, context, torch.ones(1, 7, dtype=torch.long), pooled, return_dict=False)[0]
        plain = ours(x, t, context, y=pooled)
        final = ours.final_layer
        vec = ours._vec(torch.zeros(1, 1, WIDTH), t, pooled, None, torch.tensor([0.0]))
    assert torch.allclose(got[:, :, 1:], want[:, :, 1:], atol=1e-4, rtol=0)
    assert not torch.allclose(got[:, :, :1], plain[:, :, :1], atol=1e-3)
    assert vec.shape == (1, 2, WIDTH)  # (first frame, the rest and the text)
    assert final.adaLN_modulation[1].weight.shape == (2 * WIDTH, WIDTH)


def test_diffusers_layout_converts_back_to_the_files_names():
    state = tiny_hunyuan_video_state_dict(seed=3)
    converted = convert_diffusers_state_dict(_to_diffusers(state))
    assert set(converted) == set(state)
    for name, tensor in state.items():
        assert torch.equal(converted[name], tensor), name


def test_config_from_comfyuis_names():
    config = HunyuanVideoConfig.detect_from_weights(tiny_hunyuan_video_state_dict(prefix="model.diffusion_model."),
                                                    "model.diffusion_model.")
    assert (config.in_channels, config.out_channels, config.hidden_size, config.num_heads) == (16, 16, 64, 4)
    assert (config.depth, config.depth_single_blocks, config.refiner_depth) == (2, 2, 2)
    assert config.patch_size == (1, 2, 2) and config.vec_in_dim == 32 and config.guidance_embed
    assert config.comfy_unet_config()["image_model"] == "hunyuan_video"
    released = HunyuanVideoConfig()  # the 13B release: 24 heads of 128, RoPE 16 / 56 / 56
    assert released.axes_dim == (16, 56, 56) and released.hidden_size // released.num_heads == 128
    state = tiny_hunyuan_video_state_dict()
    state["cond_type_embedding.weight"] = torch.zeros(3, WIDTH)
    with pytest.raises(HunyuanVideoConfigError, match="1.5"):
        HunyuanVideoConfig.detect_from_weights(state)
    state = tiny_hunyuan_video_state_dict()
    state["img_in.proj.weight"] = torch.zeros(WIDTH, 16, 2, 2)
    with pytest.raises(HunyuanVideoConfigError, match="HunyuanImage 2.1"):
        HunyuanVideoConfig.detect_from_weights(state)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_hunyuan_video import WRITERS_HUNYUAN_VIDEO

    folder = tmp_path_factory.mktemp("hunyuan_video")
    t2v, i2v = folder / "hunyuan_video_t2v_720p_bf16.safetensors", folder / "hunyuan_video_image_to_video.safetensors"
    WRITERS_HUNYUAN_VIDEO["unet_hunyuan_video"](t2v)
    WRITERS_HUNYUAN_VIDEO["unet_hunyuan_video_i2v"](i2v)
    return load_diffusion_model(t2v).model, load_diffusion_model(i2v).model


def test_unetloader_files_are_detected_with_comfyuis_sampling(loaded):
    t2v, i2v = loaded
    assert (t2v.family.name, i2v.family.name) == ("hunyuan_video", "hunyuan_video_i2v")
    assert (t2v.model_sampling.shift, t2v.model_sampling.multiplier) == (7.0, 1000)
    assert t2v.latent_format.scale_factor == pytest.approx(0.476986) and t2v.latent_format.channels == 16
    assert t2v.latent_format.temporal_downscale_ratio == 4 and t2v.family.geometry.downscale == 8
    assert (t2v.family.comfy_model_class, i2v.family.comfy_model_class) == ("HunyuanVideo", "HunyuanVideoI2V")
    assert i2v.diffusion_model.config.in_channels == 33


def test_diffusers_layout_file_loads_as_the_same_network(tmp_path, loaded):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.dit_checkpoints import save

    state = tiny_hunyuan_video_state_dict(seed=4)
    model = load_diffusion_model(save(_to_diffusers(state), tmp_path / "diffusers.safetensors")).model
    assert model.family.name == "hunyuan_video"
    for name, tensor in model.diffusion_model.state_dict().items():
        assert torch.equal(tensor.float(), state[name].to(tensor.dtype).float()), name


def test_extra_inputs_as_comfyui_names_them(loaded):
    t2v, _ = loaded
    conditions = HunyuanVideoConditions()
    out = conditions.extra_conds(t2v, attention_mask=torch.tensor([[1, 0]]), guiding_frame_index=0,
                                 ref_latent=torch.ones(1, 16, 1, 2, 2))
    assert out["guidance"].tolist() == [6.0] and out["guiding_frame_index"].tolist() == [0.0]
    assert out["attention_mask"].tolist() == [[1, 0]]
    assert torch.allclose(out["ref_latent"], torch.full((1, 16, 1, 2, 2), 0.476986))  # in model space
    assert conditions.extra_conds(t2v, guidance=3.5)["guidance"].tolist() == [3.5]
    pooled = torch.randn(1, 32)
    assert conditions.encode_adm(t2v, pooled_output=pooled) is pooled
    assert conditions.concat_cond(t2v, noise=torch.zeros(1, 16, 2, 2, 2), device="cpu") is None


def test_image_to_video_concat_channels(loaded):
    """HunyuanVideoI2V: the image latent (model space, padded to the latent's frames), then 1 - mask."""
    _, i2v = loaded
    noise = torch.zeros(2, 16, 3, 2, 3)
    image = torch.randn(1, 16, 1, 2, 3)
    mask = torch.ones(1, 1, 3, 2, 3)
    mask[:, :, 0] = 0.0
    out = i2v.concat_cond(noise=noise, device="cpu", concat_latent_image=image, concat_mask=mask)
    assert out.shape == (2, 17, 3, 2, 3)
    assert torch.allclose(out[:, :16, :1], (image * 0.476986).expand(2, -1, -1, -1, -1), atol=1e-6)
    assert out[:, :16, 1:].eq(0).all()
    assert out[:, 16, 0].eq(1).all() and out[:, 16, 1:].eq(0).all()  # 1 marks the given frame
    empty = i2v.concat_cond(noise=noise, device="cpu")
    assert empty.shape == (2, 17, 3, 2, 3) and not empty.any()


def test_reference_latent_text_mask_and_block_replacement():
    """"custom" guidance prepends the reference latent's tokens (dropped from the output); the token
    mask is an additive key mask over [img, txt]; a single block can be replaced."""
    network = _network(tiny_hunyuan_video_state_dict(seed=5))
    seen = []

    def replace(args, extra):
        seen.append(args["attention_mask"])
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("single_block", 1): replace}}}
    x, context, pooled = _inputs(2)
    x = x[:, :, :, :4, :4]
    t = torch.tensor([500.0])
    with torch.no_grad():
        plain = network(x, t, context, y=pooled)
        masked = network(x, t, context, y=pooled, attention_mask=torch.tensor([[1, 1, 1, 1, 1, 1, 0]]),
                         transformer_options=options)
        referenced = network(x, t, context, y=pooled, ref_latent=torch.randn(1, 16, 1, 4, 4))
    (mask,) = seen
    assert mask.shape == (1, 1, 1, 12 + 7) and mask[0, 0, 0, :18].eq(0).all() and mask[0, 0, 0, 18] < -1e30
    assert masked.shape == referenced.shape == plain.shape
    assert not torch.allclose(masked, plain) and not torch.allclose(referenced, plain)
    with pytest.raises(HunyuanVideoConfigError, match="patches"):  # an odd latent side
        network(torch.zeros(1, 16, 1, 3, 4), t, context, y=pooled)


def test_lora_names_reach_the_files_modules(loaded):
    t2v, _ = loaded
    names = ["diffusion_model." + name for name in t2v.diffusion_model.state_dict()]
    key_map = t2v.diffusion_model.lora_key_map(names)
    target = "diffusion_model.single_blocks.0.linear1.weight"
    for spelling in ("diffusion_model.single_blocks.0.linear1", "lora_unet_single_blocks_0_linear1",
                     "transformer.single_blocks.0.linear1"):
        assert key_map[spelling] == target


@pytest.fixture(scope="module")
def patchers(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_hunyuan_video import WRITERS_HUNYUAN_VIDEO

    folder = tmp_path_factory.mktemp("hunyuan_video_sampling")
    t2v, i2v = folder / "hunyuan_video_t2v_720p_bf16.safetensors", folder / "hunyuan_video_image_to_video.safetensors"
    WRITERS_HUNYUAN_VIDEO["unet_hunyuan_video"](t2v)
    WRITERS_HUNYUAN_VIDEO["unet_hunyuan_video_i2v"](i2v)
    return load_diffusion_model(t2v), load_diffusion_model(i2v)


def _text(**options):
    gen = torch.Generator().manual_seed(5)
    return [[torch.randn(1, 5, 32, generator=gen), {"pooled_output": torch.randn(1, 32, generator=gen), **options}]]


def test_sampling_the_image_to_video_paths(patchers):
    """Through KSampler's sampler: the I2V release's concat channels; "v2 (replace)"'s noise mask
    keeps the first frame's image latent; "custom"'s reference latent changes the result."""
    from nodes.sampling import common_ksampler

    t2v, i2v = patchers
    image = torch.randn(1, 16, 1, 4, 4, generator=torch.Generator().manual_seed(6))
    mask = torch.ones(1, 1, 2, 4, 4)
    mask[:, :, 0] = 0.0
    latent = {"samples": torch.zeros(1, 16, 2, 4, 4)}
    (concat,) = common_ksampler(i2v, 1, 2, 1.0, "euler", "simple",
                                _text(concat_latent_image=image, concat_mask=mask), _text(), latent)
    (plain,) = common_ksampler(i2v, 1, 2, 1.0, "euler", "simple", _text(), _text(), latent)
    assert concat["samples"].shape == (1, 16, 2, 4, 4) and torch.isfinite(concat["samples"]).all()
    assert not torch.allclose(concat["samples"], plain["samples"])
    replaced = {"samples": torch.cat((image, torch.zeros(1, 16, 1, 4, 4)), dim=2), "noise_mask": mask}
    (out,) = common_ksampler(t2v, 1, 2, 1.0, "euler", "simple", _text(guiding_frame_index=0), _text(), replaced)
    assert torch.allclose(out["samples"][:, :, :1], image, atol=1e-5)  # the noise mask keeps the given frame
    assert torch.isfinite(out["samples"]).all() and out["samples"][:, :, 1:].abs().sum() > 0
    (ref,) = common_ksampler(t2v, 1, 2, 1.0, "euler", "simple", _text(ref_latent=image), _text(), latent)
    (none,) = common_ksampler(t2v, 1, 2, 1.0, "euler", "simple", _text(), _text(), latent)
    assert not torch.allclose(ref["samples"], none["samples"])


def test_the_region_a_denoise_mask_keeps_stays_clean():
    # ComfyUI's HunyuanVideo.scale_latent_inpaint: the kept region is the clean latent at every
    # sigma (I2V keeps its first frame as given), not the latent re-noised to the step's sigma.
    latent = torch.randn(1, 16, 3, 4, 4)
    keep = HunyuanVideoConditions().scale_latent_inpaint
    assert keep(None, torch.tensor([0.7]), torch.randn_like(latent), latent) is latent
