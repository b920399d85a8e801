"""Flux.1 (dev, schnell, Kontext, Fill) and SD3/SD3.5 through the family registry: detection from
names and shapes only, whole files and split files loading to the same objects, the families'
sampling policy, text-encoder sets and model inputs (guidance, reference latents, Fill's mask
channels), and a whole flow-matching sample against diffusers' FlowMatchEulerDiscreteScheduler."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.loading import load_checkpoint
from comfy_core.models.model_sampling import FlowModelSampling, FluxModelSampling
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.split.text_encoder_files import load_text_encoders
from tests.fixtures.dit_checkpoints import CLIP_WIDTH, T5_WIDTH, UNET, flux_state_dict, save, sd3_state_dict, \
    write_split_files
from tests.fixtures.flux_files import tiny_flux_state_dict, to_diffusers_layout, tiny_flux_params
from tests.fixtures.mmdit_files import tiny_diffusers_mmdit_state_dict


def _garbage_header(state: dict) -> dict:
    """Names, shapes and dtypes only (what a safetensors header shows)."""
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


@pytest.mark.parametrize("state, family", [
    (lambda: flux_state_dict(), "flux"), (lambda: flux_state_dict(schnell=True), "flux_schnell"),
    (lambda: sd3_state_dict("sd3"), "sd3"), (lambda: sd3_state_dict("sd35"), "sd3"),
    (lambda: sd3_state_dict("sd35_medium"), "sd3")])
def test_single_files_are_detected_from_headers(state, family):
    registry = default_registry()
    state = state()
    detection = registry.detect(_garbage_header(state), "x.safetensors")
    assert detection.family.name == family
    alone = {k: v for k, v in state.items() if k.startswith(UNET)}
    assert registry.detect_diffusion_model(_garbage_header(alone)).family.name == family


def test_sd_files_are_not_taken_for_dits():
    from tests.fixtures.checkpoints import tiny_state_dict

    assert default_registry().detect(_garbage_header(tiny_state_dict("sdxl"))).family.name == "sdxl"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("dit")
    out = {}
    for name, state in (("flux", flux_state_dict()), ("schnell", flux_state_dict(schnell=True)),
                        ("sd35", sd3_state_dict("sd35"))):
        out[name] = {"single": save(state, root / f"{name}.safetensors"), **write_split_files(state, root / name, name)}
    return out


def test_families_carry_their_sampling_latents_and_encoders(files):
    expected = {"flux": (FluxModelSampling, 1.15, None, "FluxClipModel"),
                "schnell": (FlowModelSampling, 1.0, 1.0, "FluxClipModel"),
                "sd35": (FlowModelSampling, 3.0, 1000.0, "SD3ClipModel")}
    for name, (kind, shift, multiplier, clip_class) in expected.items():
        model, clip, vae = load_checkpoint(files[name]["single"])
        sampling = model.model.model_sampling
        assert type(sampling) is kind and sampling.shift == shift
        if multiplier is not None:
            assert sampling.multiplier == multiplier
        assert model.model.latent_format.channels == 16
        assert type(clip.cond_stage_model).__name__ == clip_class
        assert vae.model.config.embed_dim == 16


def _denoise(model, x, sigma, cond, pooled, **extra):
    with model.applied() as dm, torch.no_grad():
        return dm.apply_model(x, sigma, c_crossattn=cond, y=pooled, **extra)


@pytest.mark.parametrize("name", ["flux", "sd35"])
def test_split_files_load_to_the_single_files_numbers(files, name):
    single_model, single_clip, single_vae = load_checkpoint(files[name]["single"])
    model = load_diffusion_model(files[name]["unet"])
    towers = [files[name][slot] for slot in ("clip_l", "clip_g", "t5xxl") if slot in files[name]]
    clip = load_text_encoders(towers, "flux" if name == "flux" else "sd3")
    tokens = clip.tokenize("a (red:1.3) cat")
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    cond2, pooled2 = single_clip.encode_from_tokens(single_clip.tokenize("a (red:1.3) cat"), return_pooled=True)
    assert torch.equal(cond, cond2) and torch.equal(pooled, pooled2)
    x = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.7])
    split_weights = model.model.diffusion_model.state_dict()
    single_weights = single_model.model.diffusion_model.state_dict()
    assert split_weights.keys() == single_weights.keys()
    assert all(torch.equal(split_weights[k], single_weights[k]) for k in split_weights)
    # Same weights; the matrix kernels may round differently for differently aligned file views.
    a, b = _denoise(model, x, sigma, cond, pooled), _denoise(single_model, x, sigma, cond, pooled)
    assert (a - b).abs().max() < 1e-5


def test_flux_text_encoders_are_t5_states_and_clip_pooled(files):
    _model, clip, _vae = load_checkpoint(files["flux"]["single"])
    tokens = clip.tokenize("a cat")
    assert len(tokens["t5xxl"][0]) == 256 and len(tokens["l"][0]) == 77  # ComfyUI's T5 minimum for Flux
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    t5_cond, _ = clip.cond_stage_model.t5xxl.encode_token_weights(tokens["t5xxl"])
    assert torch.equal(cond, t5_cond) and cond.shape == (1, 256, T5_WIDTH) and pooled.shape == (1, CLIP_WIDTH)


def test_sd3_partial_sets_follow_comfyuis_zeros(files):
    f = files["sd35"]
    full = load_text_encoders([f["clip_l"], f["clip_g"], f["t5xxl"]], "sd3")
    tokens = full.tokenize("a cat")
    cond, pooled = full.encode_from_tokens(tokens, return_pooled=True)
    l_out, l_pooled = full.cond_stage_model.clip_l.encode_token_weights(tokens["l"])
    assert cond.shape == (1, 77 + 77, T5_WIDTH) and pooled.shape == (1, 2 * CLIP_WIDTH)
    assert torch.equal(cond[:, :77, :CLIP_WIDTH], l_out)
    assert torch.equal(cond[:, :77, 2 * CLIP_WIDTH:], torch.zeros(1, 77, T5_WIDTH - 2 * CLIP_WIDTH))
    t5_only = load_text_encoders([f["t5xxl"]], "sd3")
    cond, pooled = t5_only.encode_from_tokens(t5_only.tokenize("a cat"), return_pooled=True)
    assert cond.shape == (1, 77, T5_WIDTH) and torch.equal(pooled, torch.zeros(1, 768 + 1280))
    # CLIPTextEncodeSD3's "none" padding of empty texts: no CLIP tokens, only T5's states.
    cond, pooled = full.encode_from_tokens({"l": [], "g": [], "t5xxl": tokens["t5xxl"]}, return_pooled=True)
    assert cond.shape == (1, 77, T5_WIDTH) and torch.equal(pooled, torch.zeros(1, 768 + 1280))


def test_clip_loader_types_follow_the_families(files):
    from comfy_core.split import ClipFilesError, UnsupportedClipTypeError

    with pytest.raises(ClipFilesError, match="flux needs CLIP-L\\+T5-XXL"):
        load_text_encoders([files["sd35"]["clip_g"]], "flux")
    with pytest.raises(UnsupportedClipTypeError, match="'mochi' is not supported"):
        load_text_encoders([files["flux"]["t5xxl"]], "mochi")
    # HiDream's set takes any of its towers (ComfyUI's CLIPLoader type "hidream" with a T5 file).
    assert load_text_encoders([files["flux"]["t5xxl"]], "hidream").cond_stage_model.slots == ("t5xxl",)


class _Recorder:
    """A DIFFUSION_MODEL wrapper recording the inputs the network gets, by name (the positional
    ones named by the network's ComfyUI `_forward` order)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, executor, *args, **kwargs):
        from comfy_core.models.diffusion import wrapper_arguments

        self.calls.append((args, kwargs))
        named = dict(zip(wrapper_arguments(executor.class_obj), args))
        named.update(kwargs)
        self.seen.append({k: v for k, v in named.items() if v is not None})
        return executor(*args, **kwargs)


def test_flux_guidance_and_reference_latents_reach_the_network(files):
    from comfy_core.wrappers import WrappersMP
    from comfy_core.sampling.ksampler import sample

    model, clip, _vae = load_checkpoint(files["flux"]["single"])
    recorder = _Recorder()
    model = model.clone()
    model.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, "test", recorder)
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    reference = torch.randn(1, 16, 8, 8)
    positive = [[c, {**o, "guidance": 2.5, "reference_latents": [reference]}] for c, o in cond]
    negative = [[c, {**o, "guidance": None}] for c, o in cond]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    sample(model, noise, 1, 2.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
    # cond and uncond have different inputs, so they run as two batches of the one step
    assert len(recorder.seen) == 2
    (positive_run,) = [c for c in recorder.seen if "ref_latents" in c]
    (negative_run,) = [c for c in recorder.seen if "ref_latents" not in c]
    assert torch.equal(positive_run["guidance"], torch.tensor([2.5])) and "guidance" not in negative_run
    assert torch.allclose(positive_run["ref_latents"][0], model.model.latent_format.process_in(reference))
    # As ComfyUI's Flux `_forward` executor passes them: (x, timestep, context, y, guidance,
    # ref_latents, control, transformer_options), positionally.
    for args, kwargs in recorder.calls:
        assert len(args) == 8 and isinstance(args[7], dict) and "transformer_options" not in kwargs
    (positive_args,) = [args for args, _ in recorder.calls if args[5] is not None]
    assert torch.equal(positive_args[4], torch.tensor([2.5]))


def test_flux_default_guidance_is_comfyuis(files):
    model, _clip, _vae = load_checkpoint(files["flux"]["single"])
    extra = model.model.extra_inputs(noise=torch.zeros(1, 16, 8, 8))
    assert torch.equal(extra["guidance"], torch.tensor([3.5]))


def test_flux_fill_packs_the_mask_into_64_channels():
    from comfy_core.models.concat_inputs import flux_concat

    noise = torch.zeros(1, 16, 2, 3)
    mask = torch.arange(16 * 24, dtype=torch.float32).reshape(1, 1, 16, 24)
    image = torch.randn(1, 16, 2, 3)
    out = flux_concat(noise, "cpu", 96, 16, concat_latent_image=image, concat_mask=mask, denoise_mask=None,
                      process_latent_in=lambda t: t * 2)
    assert out.shape == (1, 80, 2, 3) and torch.equal(out[:, :16], image * 2)
    # channel 8*dy + dx of latent pixel (i, j) is the mask at pixel (8i + dy, 8j + dx)
    for i, j, dy, dx in ((0, 0, 0, 0), (1, 2, 7, 3), (0, 1, 5, 6)):
        assert out[0, 16 + 8 * dy + dx, i, j] == mask[0, 0, 8 * i + dy, 8 * j + dx]
    assert flux_concat(noise, "cpu", 16, 16, concat_latent_image=None, concat_mask=None, denoise_mask=None,
                       process_latent_in=lambda t: t) is None
    assert flux_concat(noise, "cpu", 32, 16, concat_latent_image=None, concat_mask=None, denoise_mask=None,
                       process_latent_in=lambda t: t).shape == (1, 16, 2, 3)


def test_diffusers_layout_dit_files_load(tmp_path):
    params = tiny_flux_params(guidance=True)
    bfl = tiny_flux_state_dict(guidance=True, seed=5)
    diff = save(to_diffusers_layout(bfl, params), tmp_path / "flux_diffusers.safetensors")
    ours = load_diffusion_model(save(bfl, tmp_path / "flux_bfl.safetensors"))
    theirs = load_diffusion_model(diff)
    a = ours.model.diffusion_model.state_dict()
    b = theirs.model.diffusion_model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    mmdit = load_diffusion_model(save(tiny_diffusers_mmdit_state_dict("sd35"), tmp_path / "sd3_diffusers.safetensors"))
    assert mmdit.model.family.name == "sd3"


def test_fp8_weights_are_stored_fp8_and_computed_in_float32(files):
    model = load_diffusion_model(files["flux"]["unet"], weight_dtype=torch.float8_e4m3fn)
    network = model.model.diffusion_model
    assert network.double_blocks[0].img_attn.qkv.weight.dtype == torch.float8_e4m3fn
    assert model.model.manual_cast_dtype == torch.float32
    full = load_diffusion_model(files["flux"]["unet"])
    x = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(2))
    cond, pooled = torch.randn(1, 6, T5_WIDTH), torch.randn(1, CLIP_WIDTH)
    a = _denoise(model, x, torch.tensor([0.5]), cond, pooled)
    b = _denoise(full, x, torch.tensor([0.5]), cond, pooled)
    assert a.dtype == torch.float32 and not torch.equal(a, b) and (a - b).abs().max() < 0.25 * b.abs().max()


def test_a_whole_flow_sample_matches_diffusers_flow_match_euler():
    """SD3.5's MMDiT in ours and in diffusers on the same weights; our euler over the
    scheduler's sigmas (SamplerCustom semantics) against diffusers' FlowMatchEulerDiscreteScheduler
    loop from the same noise; the result compared in the VAE's latent space (ours: process_out;
    diffusers' pipeline: latents / scaling_factor + shift_factor)."""
    diffusers = pytest.importorskip("diffusers")
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.families.sd3.latent_format import sd3_latent_format
    from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig
    from comfy_core.families.sd3.keys import convert_diffusers_state_dict
    from comfy_core.models.model_conditions import PooledConditions
    from comfy_core.patching.model import ModelPatcher
    from comfy_core.sampling.ksampler import sample_custom
    from tests.comfy_core.test_mmdit_parity import diffusers_kwargs

    state = tiny_diffusers_mmdit_state_dict("sd35", seed=7)
    theirs = diffusers.SD3Transformer2DModel(**diffusers_kwargs("sd35")).eval()
    theirs.load_state_dict(state, strict=True)
    converted = convert_diffusers_state_dict(state)
    with torch.device("meta"):
        network = MMDiT.from_config(MMDiTConfig.detect_from_weights(converted, prefix=""))
    network.load_state_dict(converted, strict=True, assign=True)
    latent_format = sd3_latent_format()
    model = ModelPatcher(DiffusionModel(network.eval(), FlowModelSampling(shift=3.0, multiplier=1000), latent_format,
                                        adm=PooledConditions()))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(4)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(1, 16, 8, 8, generator=gen)
    context, pooled = torch.randn(1, 7, 64, generator=gen), torch.randn(1, 64, generator=gen)
    latents = noise.clone()
    with torch.no_grad():
        for t in scheduler.timesteps:
            v = theirs(hidden_states=latents, encoder_hidden_states=context, pooled_projections=pooled,
                       timestep=t.reshape(1)).sample
            latents = scheduler.step(v, t, latents).prev_sample
    expected = latents / latent_format.scale_factor + latent_format.shift_factor
    cond = [[context, {"pooled_output": pooled}]]
    ours = sample_custom(model, noise, 1.0, "euler", scheduler.sigmas.clone(), cond, cond, torch.zeros_like(noise))
    assert (ours - expected).abs().max() < 1e-4


def test_files_shipped_in_fp8_stay_fp8(tmp_path):
    """Flux's "fp8" single files and fp8 T5 files: weights stored in fp8, computed in float32."""
    state = flux_state_dict(seed=4)
    shipped = {k: (v.to(torch.float8_e4m3fn) if (k.startswith(UNET) or k.startswith("text_encoders.t5xxl."))
                   and v.is_floating_point() else v) for k, v in state.items()}
    model, clip, _vae = load_checkpoint(save(shipped, tmp_path / "flux1-dev-fp8.safetensors"))
    assert model.model.diffusion_model.img_in.weight.dtype == torch.float8_e4m3fn
    assert model.model.manual_cast_dtype == torch.float32
    t5 = clip.cond_stage_model.t5xxl
    assert any(p.dtype == torch.float8_e4m3fn for p in t5.parameters())
    cond, pooled = clip.encode_from_tokens(clip.tokenize("a cat"), return_pooled=True)
    assert cond.dtype == torch.float32 and torch.isfinite(cond).all()
    out = _denoise(model, torch.randn(1, 16, 8, 8), torch.tensor([0.9]), cond, pooled)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    alone = load_diffusion_model(save({k[len(UNET):]: v for k, v in shipped.items() if k.startswith(UNET)},
                                      tmp_path / "flux1-dev-fp8-unet.safetensors"))
    assert alone.model.diffusion_model.img_in.weight.dtype == torch.float8_e4m3fn


def test_a_single_file_without_text_encoders_gives_no_clip(tmp_path):
    """SD3.5 releases without text encoders: the CLIP output is None (ComfyUI warns and returns None)."""
    from nodes.conditioning import clip_text_encode
    from nodes.errors import NodeInputError

    state = {k: v for k, v in sd3_state_dict("sd35").items() if not k.startswith("text_encoders.")}
    model, clip, vae = load_checkpoint(save(state, tmp_path / "sd3.5_large.safetensors"))
    assert clip is None and model.model.family.name == "sd3" and vae is not None
    with pytest.raises(NodeInputError, match="clip"):
        clip_text_encode("a cat", None)


def _scaled_fp8(state: dict, prefix: str) -> dict:
    """ComfyUI's scaled-fp8 layout: each 2-D weight stored as fp8 of weight / scale with its
    `scale_weight`, a `scaled_fp8` marker under the diffusion model's prefix."""
    out = {}
    for key, value in state.items():
        if key.startswith(prefix) and key.endswith(".weight") and value.ndim == 2:
            scale = value.abs().max() / 448.0
            out[key] = (value / scale).to(torch.float8_e4m3fn)
            out[key[:-len("weight")] + "scale_weight"] = scale.reshape(())
        elif key.startswith(prefix) and value.is_floating_point():
            out[key] = value.to(torch.float8_e4m3fn)
        else:
            out[key] = value
    out[prefix + "scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    return out


def test_scaled_fp8_files_load_their_true_weights(tmp_path):
    """sd3.5_large_fp8_scaled-style files: weight = fp8 value * scale_weight, not the raw fp8 value."""
    state = sd3_state_dict("sd35", seed=6)
    reference, _clip, _vae = load_checkpoint(save(state, tmp_path / "sd35.safetensors"), output_clip=False)
    scaled = _scaled_fp8(state, UNET)
    model, _clip, _vae = load_checkpoint(save(scaled, tmp_path / "sd3.5_large_fp8_scaled.safetensors"), output_clip=False)
    key = "joint_blocks.0.x_block.attn.qkv.weight"
    # Both loaders keep the raw fp8 value and its scale (ComfyUI's scaled_fp8_ops): the true
    # weight is fp8 value x scale_weight, within fp8's 3-bit mantissa of the original.
    layer = model.model.diffusion_model.get_submodule(key[:-len(".weight")])
    assert layer.weight.dtype == torch.float8_e4m3fn
    ours = layer.convert_weight(layer.weight.float())
    true = reference.model.diffusion_model.state_dict()[key]
    assert (ours - true).abs().max() <= 0.07 * true.abs().max()  # the scaled values, not the raw ones
    alone = load_diffusion_model(save({k[len(UNET):]: v for k, v in scaled.items() if k.startswith(UNET)},
                                      tmp_path / "sd35_scaled_unet.safetensors"))
    kept = alone.model.diffusion_model.get_submodule(key[:-len(".weight")])
    assert torch.equal(kept.convert_weight(kept.weight.float()), ours)
    x = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(3))
    cond, pooled = torch.randn(1, 5, T5_WIDTH), torch.randn(1, 2 * CLIP_WIDTH)
    a, b = _denoise(model, x, torch.tensor([0.6]), cond, pooled), _denoise(reference, x, torch.tensor([0.6]), cond, pooled)
    assert (a - b).abs().max() < 0.2 * b.abs().max()


def test_scaled_fp8_t5_files_load_through_the_clip_loaders(tmp_path):
    """t5xxl_fp8_e4m3fn_scaled: per-layer scales read in float32 (not rounded to fp8, where small
    scales underflow to zero), weights dequantized."""
    from tests.fixtures.dit_checkpoints import t5_tower

    tower = t5_tower("", seed=9)
    scaled = {"scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn)}
    for key, value in tower.items():
        if key.startswith("encoder.block.") and key.endswith(".weight") and value.ndim == 2:
            scale = value.abs().max() / 448.0  # ~1e-3: below fp8's smallest normal value
            scaled[key] = (value / scale).to(torch.float8_e4m3fn)
            scaled[key[:-len("weight")] + "scale_weight"] = scale.reshape(())
        else:
            scaled[key] = value.to(torch.float8_e4m3fn) if value.is_floating_point() else value
    clip_l = save({k[len("text_encoders.clip_l.transformer."):]: v for k, v in flux_state_dict().items()
                   if k.startswith("text_encoders.clip_l.transformer.")}, tmp_path / "clip_l.safetensors")
    plain = load_text_encoders([clip_l, save(tower, tmp_path / "t5xxl_fp16.safetensors")], "flux")
    ours = load_text_encoders([clip_l, save(scaled, tmp_path / "t5xxl_fp8_e4m3fn_scaled.safetensors")], "flux")
    tokens = plain.tokenize("a cat")
    a, b = ours.encode_from_tokens(tokens), plain.encode_from_tokens(tokens)
    assert torch.isfinite(a).all() and (a - b).abs().max() < 0.2 * b.abs().max()
