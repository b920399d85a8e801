"""The Ovis-Image family (comfy_core/families/ovis_image): detection from names and shapes, the
network against diffusers' `OvisImageTransformer2DModel` on tiny random weights loaded from a file
with ComfyUI's names, the family's policy, and the Ovis 2.5 (Qwen3) text-encoder set against
diffusers' `OvisImagePipeline` prompt encoding on transformers' Qwen3Model."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.ovis_image.clip import LLAMA_TEMPLATE, OvisTEModel, OvisTokenizer, template_end
from comfy_core.families.ovis_image.dit import OvisImageConfig, OvisImageConfigError, text_ids
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.ovis_image_files import TINY_OVIS, comfy_state_dict, reference_model, write_ovis_image_unet

UNET = "model.diffusion_model."


class _Shape:
    def __init__(self, shape):
        self.shape = tuple(shape)


def _header(state: dict) -> dict:
    return {k: _Shape(v.shape) for k, v in state.items()}


@pytest.fixture(scope="module")
def reference():
    return reference_model(seed=1)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_ovis_image_unet(tmp_path_factory.mktemp("ovis") / "ovis_image.safetensors",
                                                      seed=1))


def test_config_is_read_from_names_and_shapes(reference):
    config = OvisImageConfig.detect_from_weights(_header(comfy_state_dict(reference)))
    assert (config.hidden_size, config.num_heads, config.depth, config.depth_single_blocks) == (48, 2, 2, 2)
    assert (config.in_channels, config.out_channels, config.context_in_dim, config.mlp_ratio) == (16, 16, 32, 4.0)
    assert sum(config.axes_dim) == 24
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "flux" and unet["vec_in_dim"] is None and unet["guidance_embed"] is False
    assert unet["yak_mlp"] and unet["txt_norm"] and unet["txt_ids_dims"] == [1, 2]


def test_inconsistent_weights_are_typed_errors(reference):
    state = _header(comfy_state_dict(reference))
    missing = dict(state)
    del missing["txt_norm.scale"]
    with pytest.raises(OvisImageConfigError, match="txt_norm.scale"):
        OvisImageConfig.detect_from_weights(missing)
    bad = dict(state)
    bad["single_blocks.1.linear1.weight"] = _Shape((10, 48))
    with pytest.raises(OvisImageConfigError, match="single_blocks.1.linear1.weight"):
        OvisImageConfig.detect_from_weights(bad)
    flux_like = dict(state)
    flux_like["vector_in.in_layer.weight"] = _Shape((48, 12))
    with pytest.raises(OvisImageConfigError, match="vector_in"):
        OvisImageConfig.detect_from_weights(flux_like)


def test_single_and_split_files_are_detected_as_ovis_image_not_flux(reference, loaded):
    registry = default_registry()
    single = _header(comfy_state_dict(reference, prefix=UNET))
    assert registry.detect(single).family.name == "ovis_image"
    assert registry.detect_diffusion_model(_header(comfy_state_dict(reference, prefix=UNET))).family.name \
        == "ovis_image"
    assert loaded.model.family.name == "ovis_image"
    assert type(loaded.model.diffusion_model).__name__ == "Flux"  # ComfyUI's class for this model


def _pack(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape  # diffusers' _pack_latents: [B, (h/2)(w/2), c*4]
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def _unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    b, _, d = tokens.shape
    c = d // 4
    return tokens.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def _image_ids(h: int, w: int) -> torch.Tensor:
    ids = torch.zeros(h // 2, w // 2, 3)
    ids[..., 1] += torch.arange(h // 2)[:, None]
    ids[..., 2] += torch.arange(w // 2)[None, :]
    return ids.reshape(-1, 3)


def diffusers_forward(model, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    h, w = x.shape[-2:]
    txt = torch.zeros(context.shape[1], 3)
    txt[:, 1] = txt[:, 2] = torch.arange(context.shape[1]).float()  # the pipeline's text_ids
    out = model(hidden_states=_pack(x), encoder_hidden_states=context, timestep=sigma, img_ids=_image_ids(h, w),
                txt_ids=txt, return_dict=False)[0]
    return _unpack(out, h, w)


@pytest.mark.parametrize("size, tokens", [((8, 8), 7), ((6, 10), 12)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(loaded, reference, size, tokens):
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 16, *size, generator=gen)
    sigma = torch.tensor([0.7, 0.15])
    context = torch.randn(2, tokens, TINY_OVIS["joint_attention_dim"], generator=gen)
    with torch.no_grad():
        ours = network(x, sigma, context)
        theirs = diffusers_forward(reference, x, sigma, context)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4


def test_text_positions_are_on_the_row_and_column_axes():
    ids = text_ids(1, 4, "cpu", torch.float32)
    assert ids[0].tolist() == [[0, 0, 0], [0, 1, 1], [0, 2, 2], [0, 3, 3]]


def test_bad_context_width_is_a_typed_error(loaded):
    with pytest.raises(ValueError, match="32"):
        loaded.model.diffusion_model(torch.zeros(1, 16, 4, 4), torch.tensor([0.5]), torch.zeros(1, 3, 20))


def test_family_policy(loaded):
    family = loaded.model.family
    assert family.sampling.prediction == "flow" and family.sampling.shift == 1.0
    assert family.geometry.latent_channels == 16
    assert family.text_encoders.clip_types == ("ovis",)
    assert family.conditioning.extra_conds(loaded.model) == {}  # no y, no guidance


def test_sample_from_the_unetloader_file_matches_diffusers_ovis_image_pipeline(loaded, reference):
    """The whole loop: our KSampler-style sample (euler, CFG 4, three given sigmas) against diffusers'
    `OvisImagePipeline` (FlowMatchEulerDiscreteScheduler, its CFG) from the same noise, sigmas and
    text states; latents within 1e-4."""
    from diffusers import FlowMatchEulerDiscreteScheduler, OvisImagePipeline

    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(7)
    pos = torch.randn(1, 9, 32, generator=gen)
    neg = torch.randn(1, 9, 32, generator=gen)
    noise = torch.randn(1, 16, 8, 10, generator=torch.Generator().manual_seed(0))
    cfg, steps = 4.0, 3
    sigmas = [1.0, 2 / 3, 1 / 3]
    ours = sample(loaded, noise, steps, cfg, "euler", "simple", [[pos, {}]], [[neg, {}]], torch.zeros_like(noise),
                  sigmas=torch.tensor(sigmas + [0.0]))
    pipe = OvisImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False),
                             vae=None, text_encoder=None, tokenizer=None, transformer=reference)
    pipe.set_progress_bar_config(disable=True)
    packed = _pack(noise)  # sigma 1: the noise itself is the start of a full denoise
    with torch.no_grad():
        out = pipe(prompt_embeds=pos, negative_prompt=None, negative_prompt_embeds=neg, guidance_scale=cfg,
                   height=64, width=80, sigmas=sigmas, latents=packed, output_type="latent", return_dict=False)[0]
    theirs = loaded.model.family.latent_format.process_out(_unpack(out, 8, 10))  # KSampler returns file space
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max() < 1e-4
    assert (ours - noise).abs().max() > 1e-2  # the model moved the sample


# --- Ovis 2.5's text encoder --------------------------------------------------------------------------


def test_template_end_is_the_colon_after_background():
    ids = [151644, 872, 198, 74785, 323, 4004, 25, 264, 8251]
    assert template_end([(i, 1.0) for i in ids]) == 6
    assert template_end([(i, 1.0) for i in [1, 2, 3]]) == 0


@pytest.fixture(scope="module")
def te_state():
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict

    return tiny_qwen3_state_dict(seed=3)


@pytest.fixture(scope="module")
def te_file(tmp_path_factory, te_state):
    from tests.fixtures.qwen3_files import write_qwen3_file

    return write_qwen3_file(tmp_path_factory.mktemp("ovis_te") / "ovis_2.5.safetensors", te_state,
                            dtype=torch.float32)


def test_cliploader_ovis_matches_the_pipelines_prompt_encoding(te_file, te_state):
    """CLIPLoader type "ovis" on a Qwen3 file: the template, 284 tokens, the final normed states with
    pads masked and zeroed, the first 28 tokens dropped: diffusers' `_get_ovis_prompt_embeds` on
    transformers' Qwen3Model (the chat template written out as the pipeline's
    `apply_chat_template(..., add_generation_prompt=True, enable_thinking=False)` renders it)."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.qwen3_files import reference_model as qwen3_reference

    clip = load_text_encoders([te_file], "ovis")
    assert isinstance(clip.cond_stage_model, OvisTEModel) and isinstance(clip.tokenizer, OvisTokenizer)
    prompt = "a red fox (reading:1.3) a book"
    tokens = clip.tokenize(prompt)
    (key,) = tokens
    ids = [t for t, _ in tokens[key][0]]
    assert all(w == 1.0 for _, w in tokens[key][0])  # weights disabled
    system = ("Describe the image by detailing the color, quantity, text, shape, size, texture, spatial "
              "relationships of the objects and background: ")
    rendered = f"<|im_start|>user\n{system}{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert rendered == LLAMA_TEMPLATE.format(prompt)
    text_ids_ = getattr(clip.tokenizer, key).encode(rendered)
    assert len(ids) == 284 and ids[:len(text_ids_)] == text_ids_ and set(ids[len(text_ids_):]) == {151643}
    extra = clip.encode_from_tokens(tokens, return_dict=True)
    cond = extra["cond"]
    assert cond.shape == (1, 256, 32) and extra["pooled_output"] is None and "attention_mask" not in extra
    mask = torch.zeros(1, 284, dtype=torch.long)
    mask[:, :len(text_ids_)] = 1
    with torch.no_grad():
        states = qwen3_reference(te_state)(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state
    expected = (states * mask[..., None])[:, 28:]
    torch.testing.assert_close(cond, expected, atol=1e-4, rtol=1e-4)
    assert cond[0, len(text_ids_) - 28:].abs().max() == 0  # the pads are zeros


def test_packs_see_comfyuis_flux_model_class(loaded):
    from compat.mp_model_base import Flux, SD3

    assert isinstance(loaded.model, Flux) and not isinstance(loaded.model, SD3)
