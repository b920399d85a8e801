"""Chroma through the family registry: detection from headers (single and split files, never taken
for Flux), the network against diffusers' `ChromaTransformer2DModel` on the same tiny weights,
diffusers-layout files, the family's sampling / text encoders / model inputs as ComfyUI 0.3.64's
`supported_models.Chroma` and `model_base.Chroma`, and single vs split files sampling alike."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.chroma.dit import (COMFY_MOD_INDEX_LENGTH, Chroma, ChromaConfig, ChromaConfigError,
                                            convert_diffusers_state_dict)
from tests.fixtures.chroma_files import (UNET, chroma_state_dict, diffusers_chroma_kwargs, tiny_chroma_params,
                                         tiny_chroma_state_dict, to_diffusers_layout, write_chroma_files)
from tests.fixtures.dit_checkpoints import T5_WIDTH, flux_state_dict, save


def _header(state: dict) -> dict:
    """Names, shapes and dtypes only (what a safetensors header shows)."""
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


# --- detection ---------------------------------------------------------------------------------------

def test_single_and_split_files_are_detected_from_headers():
    registry = default_registry()
    state = chroma_state_dict()
    detection = registry.detect(_header(state), "chroma.safetensors")
    assert detection.family.name == "chroma"
    assert detection.config == ChromaConfig(**{**tiny_chroma_params(), "axes_dim": (4, 14, 14)})
    alone = {k: v for k, v in state.items() if k.startswith(UNET)}
    assert registry.detect_diffusion_model(_header(alone)).family.name == "chroma"
    # Flux files stay Flux (both have double blocks; only Chroma has the approximator, only Flux vector_in)
    assert registry.detect(_header(flux_state_dict())).family.name == "flux"
    flux_alone = {k: v for k, v in flux_state_dict().items() if k.startswith(UNET)}
    assert registry.detect_diffusion_model(_header(flux_alone)).family.name == "flux"


def test_inconsistent_weights_are_typed_errors():
    header = _header(tiny_chroma_state_dict())
    broken = {k: v for k, v in header.items() if k != "distilled_guidance_layer.norms.1.scale"}
    with pytest.raises(ChromaConfigError, match="2 layers but 1 norms"):
        ChromaConfig.detect_from_weights(broken)
    with pytest.raises(ChromaConfigError, match="vector_in"):
        ChromaConfig.detect_from_weights({**header, "vector_in.in_layer.weight": SimpleNamespace(shape=(64, 32))})
    wrong = {**header, "single_blocks.1.linear2.weight": SimpleNamespace(shape=(64, 100))}
    with pytest.raises(ChromaConfigError, match="single_blocks.1.linear2.weight"):
        ChromaConfig.detect_from_weights(wrong)
    assert issubclass(ChromaConfigError, ValueError)


def test_released_model_has_comfyuis_344_modulation_rows():
    assert ChromaConfig().mod_index_length == COMFY_MOD_INDEX_LENGTH == 3 * 38 + 12 * 19 + 2
    assert ChromaConfig(**{**tiny_chroma_params(), "axes_dim": (4, 14, 14)}).mod_index_length == 344
    assert ChromaConfig(depth=30).mod_index_length == 3 * 38 + 12 * 30 + 2  # more blocks: a row per vector


# --- numerics against diffusers ---------------------------------------------------------------------------

def _patchify(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, c, h, w = x.shape
    tokens = x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * 4)
    ids = torch.zeros(h // 2, w // 2, 3)
    ids[..., 1] = torch.arange(h // 2)[:, None]
    ids[..., 2] = torch.arange(w // 2)[None]
    return tokens, ids.reshape(-1, 3)


def _unpatchify(tokens: torch.Tensor, b: int, c: int, h: int, w: int) -> torch.Tensor:
    return tokens.reshape(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@pytest.fixture(scope="module")
def diffusers_chroma():
    diffusers = pytest.importorskip("diffusers")
    from diffusers.models.embeddings import get_timestep_embedding

    state = tiny_chroma_state_dict(seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = diffusers.ChromaTransformer2DModel(**diffusers_chroma_kwargs()).eval()
    theirs.load_state_dict(to_diffusers_layout(state, tiny_chroma_params()), strict=True)
    # ComfyUI (and the released model) take 344 modulation rows, the final layer's from the last two;
    # diffusers sizes the table to the blocks: give it ComfyUI's 344 rows (equal at full size).
    theirs.time_text_embed.mod_proj = get_timestep_embedding(torch.arange(COMFY_MOD_INDEX_LENGTH) * 1000, 32,
                                                             flip_sin_to_cos=True, downscale_freq_shift=0)
    for norm in theirs.distilled_guidance_layer.norms:
        norm.eps = 1e-6  # our (ComfyUI's) RMSNorm eps; diffusers' default is the dtype's epsilon
    ours = Chroma.from_config(ChromaConfig.detect_from_weights(state)).eval()
    ours.load_state_dict(state, strict=True)
    return ours, theirs, state


def test_network_matches_diffusers_on_the_same_weights(diffusers_chroma):
    ours, theirs, _ = diffusers_chroma
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 6, 8, generator=gen)
    context = torch.randn(2, 5, T5_WIDTH, generator=gen)
    sigma = torch.tensor([0.8, 0.3])
    tokens, img_ids = _patchify(x)
    with torch.no_grad():
        mine = ours(x, sigma, context, torch.zeros(2))
        out = theirs(tokens, context, sigma, img_ids=img_ids, txt_ids=torch.zeros(5, 3), return_dict=False)[0]
    reference = _unpatchify(out, 2, 16, 6, 8)
    assert mine.shape == (2, 16, 6, 8)
    torch.testing.assert_close(mine, reference, atol=2e-5, rtol=1e-5)


def test_guidance_reaches_the_approximator_and_none_is_zero(diffusers_chroma):
    ours, _, _ = diffusers_chroma
    gen = torch.Generator().manual_seed(2)
    x, context, sigma = torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 3, T5_WIDTH, generator=gen), \
        torch.tensor([0.5])
    with torch.no_grad():
        zero = ours(x, sigma, context, torch.zeros(1))
        assert torch.equal(ours(x, sigma, context, None), zero)
        assert not torch.allclose(ours(x, sigma, context, torch.tensor([4.0])), zero)
        # odd sizes are padded to the patch and cut back
        assert ours(torch.randn(1, 16, 5, 7), sigma, context, None).shape == (1, 16, 5, 7)


def test_block_patches_get_the_modulations_and_skips_drop_blocks(diffusers_chroma):
    ours, _, _ = diffusers_chroma
    gen = torch.Generator().manual_seed(3)
    x, context, sigma = torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 3, T5_WIDTH, generator=gen), \
        torch.tensor([0.5])
    seen = []

    def double(args, extra):
        (img_mod1, _), (txt_mod1, _) = args["vec"]
        seen.append((args["transformer_options"]["block_type"], tuple(img_mod1.shift.shape)))
        return extra["original_block"](args)

    def single(args, extra):
        seen.append((args["transformer_options"]["block_type"], tuple(args["vec"].gate.shape)))
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 0): double, ("single_block", 1): single}}}
    with torch.no_grad():
        plain = ours(x, sigma, context, None)
        patched = ours(x, sigma, context, None, transformer_options=options)
        ours.skip_dit = [1]
        try:
            skipped = ours(x, sigma, context, None)
        finally:
            ours.skip_dit = []
    assert torch.equal(plain, patched)
    assert seen == [("double", (1, 1, 64)), ("single", (1, 1, 64))]
    assert not torch.allclose(skipped, plain)


def test_diffusers_layout_converts_to_comfyuis_names(tmp_path, diffusers_chroma):
    from comfy_core.split.diffusion_model import load_diffusion_model

    _, _, state = diffusers_chroma
    diffusers_state = to_diffusers_layout(state, tiny_chroma_params())
    converted = convert_diffusers_state_dict(diffusers_state)
    assert converted.keys() == state.keys() and all(torch.equal(converted[k], state[k]) for k in state)
    model = load_diffusion_model(save(diffusers_state, tmp_path / "chroma_diffusers.safetensors"))
    assert model.model.family.name == "chroma"
    loaded = model.model.diffusion_model.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)


# --- the family end to end ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_chroma_files(tmp_path_factory.mktemp("chroma"))


def test_family_policy_is_comfyuis(files):
    from comfy_core.loading import load_checkpoint
    from comfy_core.models.model_sampling import FluxModelSampling

    model, clip, vae = load_checkpoint(files["single"])
    sampling = model.model.model_sampling
    assert type(sampling) is FluxModelSampling and sampling.shift == 1.15
    assert model.model.latent_format.channels == 16 and vae.model.config.embed_dim == 16
    assert type(clip.cond_stage_model).__name__ == "PixArtT5XXL"
    assert type(clip.tokenizer).__name__ == "PixArtTokenizer"
    assert model.model.model_config.memory_usage_factor == 3.2
    assert model.model.model_config.unet_config["image_model"] == "chroma"
    # model_base.Chroma: guidance defaults to 0, None leaves it out; no label embedding
    assert torch.equal(model.model.extra_inputs(noise=torch.zeros(1, 16, 8, 8))["guidance"], torch.tensor([0.0]))
    assert model.model.extra_inputs(noise=torch.zeros(1, 16, 8, 8), guidance=None) == {}
    assert model.model.encode_adm(pooled_output=torch.ones(1, 8)) is None


def test_t5_tokens_follow_pixart_t5(files):
    from comfy_core.split.text_encoder_files import load_text_encoders

    clip = load_text_encoders([files["t5xxl"]], "chroma")
    assert clip.tokenize("") == {"t5xxl": [[(1, 1.0)]]}  # min_length 1, no padding to a maximum
    tokens = clip.tokenize("a (red:1.5) cat")
    row = tokens["t5xxl"][0]
    assert row[-1] == (1, 1.0) and any(w == 1.5 for _, w in row)
    tower = clip.cond_stage_model.t5xxl
    assert tower.empty_tokens(4) == [0, 0, 0, 0]  # PixArt's empty prompt: pad tokens only
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    assert pooled is None and cond.shape == (1, len(row), T5_WIDTH)
    # weighted tokens interpolate from the all-pad prompt's states
    ids = [[t for t, _ in row], tower.empty_tokens(len(row))]
    with torch.no_grad():
        states = tower(ids)[0]
    weights = torch.tensor([w for _, w in row])[:, None]
    torch.testing.assert_close(cond[0], states[1] + (states[0] - states[1]) * weights, atol=1e-5, rtol=1e-5)


def test_single_and_split_files_sample_alike(files):
    from comfy_core.loading import load_checkpoint
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.split.text_encoder_files import load_text_encoders

    single, single_clip, _ = load_checkpoint(files["single"])
    split, split_clip = load_diffusion_model(files["unet"]), load_text_encoders([files["t5xxl"]], "chroma")
    assert split.model.family.name == "chroma"
    results = []
    for model, clip in ((single, single_clip), (split, split_clip)):
        positive = clip.encode_from_tokens_scheduled(clip.tokenize("a red cat"))
        negative = clip.encode_from_tokens_scheduled(clip.tokenize(""))
        noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
        results.append(sample(model, noise, 2, 3.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8)))
    assert results[0].shape == (1, 16, 8, 8) and torch.isfinite(results[0]).all()
    assert (results[0] - results[1]).abs().max() < 1e-4


def test_clip_loader_type_chroma_is_supported(files):
    from comfy_core.split import ClipFilesError
    from comfy_core.split.clip_types import NEEDS, supported_types
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.dit_checkpoints import clip_tower

    assert "chroma" not in NEEDS and "chroma" in supported_types(default_registry().encoder_sets())
    clip_l = save({k[len("x."):]: v for k, v in clip_tower("x.", 2, 1, projection=True).items()},
                  files["t5xxl"].parent / "clip_l.safetensors")
    with pytest.raises(ClipFilesError, match="chroma needs T5-XXL"):
        load_text_encoders([clip_l], "chroma")


def test_comfyui_model_class_is_chroma(files):
    from comfy_core.loading import load_checkpoint
    from compat.mp_model_base import CLASS_OF_FAMILY, Chroma as ChromaClass, Flux as FluxClass

    model, _, _ = load_checkpoint(files["single"], output_clip=False, output_vae=False)
    assert CLASS_OF_FAMILY["chroma"] is ChromaClass
    assert isinstance(model.model, ChromaClass) and isinstance(model.model, FluxClass)
