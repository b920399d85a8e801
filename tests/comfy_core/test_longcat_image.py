"""LongCat-Image (comfy_core/families/flux/longcat*.py): detection from names and shapes, the network
against diffusers' `LongCatImageTransformer2DModel` on tiny random weights loaded from a file with
ComfyUI's names (text-to-image and the edit's reference latent), the family's policy, and the
Qwen2.5-VL text-encoder set (CLIPLoader type "longcat_image") against diffusers'
`LongCatImagePipeline._encode_prompt` on transformers' Qwen2.5-VL."""
from __future__ import annotations

import types

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.flux.longcat_clip import (LongCatImageTEModel, LongCatImageTokenizer, conditioning_span,
                                                   split_quotation)
from comfy_core.families.flux.longcat_dit import (LongCatImageConfig, LongCatImageConfigError, longcat_rope_options,
                                                  text_ids)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.template_models_longcat import (TINY_LONGCAT, comfy_state_dict, reference_model,
                                                    write_longcat_unet)

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

    return load_diffusion_model(write_longcat_unet(tmp_path_factory.mktemp("longcat") / "longcat_image.safetensors",
                                                   seed=1))


def test_config_is_read_from_names_and_shapes(reference):
    config = LongCatImageConfig.detect_from_weights(_header(comfy_state_dict(reference)))
    assert (config.hidden_size, config.num_heads, config.depth, config.depth_single_blocks) == (48, 2, 2, 2)
    assert (config.in_channels, config.out_channels, config.context_in_dim, config.mlp_ratio) == (16, 16, 32, 4.0)
    assert config.axes_dim == (4, 10, 10) and config.qkv_bias
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "flux" and unet["vec_in_dim"] is None and unet["guidance_embed"] is False
    assert unet["txt_ids_dims"] == [1, 2] and unet["context_in_dim"] == 32


def test_inconsistent_or_foreign_weights_are_typed_errors(reference):
    state = _header(comfy_state_dict(reference))
    missing = dict(state)
    del missing["txt_in.weight"]
    with pytest.raises(LongCatImageConfigError, match="txt_in.weight"):
        LongCatImageConfig.detect_from_weights(missing)
    bad = dict(state)
    bad["single_blocks.1.linear1.weight"] = _Shape((10, 48))
    with pytest.raises(LongCatImageConfigError, match="single_blocks.1.linear1.weight"):
        LongCatImageConfig.detect_from_weights(bad)
    for foreign in ("vector_in.in_layer.weight", "guidance_in.in_layer.weight", "txt_norm.scale",
                    "double_blocks.0.img_mlp.gate_proj.weight"):
        with pytest.raises(LongCatImageConfigError, match=foreign.split(".")[0]):
            LongCatImageConfig.detect_from_weights({**state, foreign: _Shape((48, 12))})


def test_single_and_split_files_are_detected_as_longcat_not_flux(reference, loaded):
    registry = default_registry()
    single = _header(comfy_state_dict(reference, prefix=UNET))
    assert registry.detect(single).family.name == "longcat_image"
    assert registry.detect_diffusion_model(single).family.name == "longcat_image"
    assert loaded.model.family.name == "longcat_image"
    assert type(loaded.model.diffusion_model).__name__ == "Flux"  # ComfyUI's class for this model
    # a Flux.1 file (pooled CLIP, guidance) is still Flux's, not LongCat's
    flux = dict(single)
    flux[UNET + "vector_in.in_layer.weight"] = _Shape((48, 12))
    flux[UNET + "vector_in.in_layer.bias"] = _Shape((48,))
    flux[UNET + "vector_in.out_layer.weight"] = _Shape((48, 48))
    flux[UNET + "vector_in.out_layer.bias"] = _Shape((48,))
    assert registry.detect_diffusion_model(flux).family.name == "flux_schnell"


def _pack(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape  # diffusers' _pack_latents: [B, (h/2)(w/2), c*4]
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def _unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    b, _, d = tokens.shape
    c = d // 4
    return tokens.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def _pos_ids(modality: int, start: int, h: int, w: int) -> torch.Tensor:
    """diffusers' `prepare_pos_ids(modality_id, type="image", start=(start, start), ...)`, written out."""
    ids = torch.zeros(h, w, 3)
    ids[..., 0] = modality
    ids[..., 1] += torch.arange(h)[:, None] + start
    ids[..., 2] += torch.arange(w)[None, :] + start
    return ids.reshape(-1, 3)


def diffusers_forward(model, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                      ref: torch.Tensor | None = None) -> torch.Tensor:
    """The pipelines' call: text ids `(0, i, i)`, the image `(1, T + row, T + col)`, the edit's
    reference latent appended as `(2, T + row, T + col)` (LongCatImageEditPipeline), output cut to
    the image."""
    h, w = x.shape[-2:]
    length = context.shape[1]
    txt = torch.zeros(length, 3)
    txt[:, 1] = txt[:, 2] = torch.arange(length).float()
    tokens, ids = _pack(x), _pos_ids(1, length, h // 2, w // 2)
    if ref is not None:
        tokens = torch.cat([tokens, _pack(ref)], dim=1)
        ids = torch.cat([ids, _pos_ids(2, length, ref.shape[-2] // 2, ref.shape[-1] // 2)], dim=0)
    out = model(hidden_states=tokens, encoder_hidden_states=context, timestep=sigma, img_ids=ids, txt_ids=txt,
                return_dict=False)[0]
    return _unpack(out[:, :(h // 2) * (w // 2)], h, w)


@pytest.mark.parametrize("size, tokens", [((8, 8), 7), ((6, 10), 12)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(loaded, reference, size, tokens):
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 16, *size, generator=gen)
    sigma = torch.tensor([0.7, 0.15])
    context = torch.randn(2, tokens, TINY_LONGCAT["joint_attention_dim"], generator=gen)
    with torch.no_grad():
        ours = network(x, sigma, context)
        theirs = diffusers_forward(reference, x, sigma, context)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4


def test_the_edit_reference_latent_matches_diffusers_edit_positions(loaded, reference):
    """FluxKontextMultiReferenceLatentMethod "index" (the edit template's): the reference on index 2,
    shifted past the text like the image."""
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 16, 8, 6, generator=gen)
    ref = torch.randn(1, 16, 8, 6, generator=gen)
    context = torch.randn(1, 9, TINY_LONGCAT["joint_attention_dim"], generator=gen)
    sigma = torch.tensor([0.4])
    with torch.no_grad():
        ours = network(x, sigma, context, ref_latents=[ref], ref_latents_method="index")
        theirs = diffusers_forward(reference, x, sigma, context, ref=ref)
        plain = network(x, sigma, context)
    assert (ours - theirs).abs().max() < 1e-4
    assert (ours - plain).abs().max() > 1e-3  # the reference is attended


def test_a_diffusers_layout_file_loads_as_the_same_network(tmp_path, loaded, reference):
    """Meituan's release layout (diffusers' names, `time_embed.`) converted to ComfyUI's."""
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path / "diffusion_pytorch_model.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(path))
    model = load_diffusion_model(path)
    assert model.model.family.name == "longcat_image"
    ours = model.model.diffusion_model.state_dict()
    for name, tensor in loaded.model.diffusion_model.state_dict().items():
        assert torch.equal(ours[name], tensor), name


def test_lora_names_reach_the_blocks(loaded):
    names = [k for k in loaded.model.diffusion_model.state_dict()]
    key_map = loaded.model.diffusion_model.lora_key_map(["diffusion_model." + n for n in names])
    assert "lora_unet_double_blocks_0_img_attn_qkv" in key_map
    assert "transformer.transformer_blocks.0.attn.to_q" in key_map  # diffusers / PEFT spelling


def test_text_positions_and_the_image_shift_are_comfyuis():
    ids = text_ids(1, 4, "cpu")
    assert ids.dtype == torch.float32 and ids[0].tolist() == [[0, 0, 0], [0, 1, 1], [0, 2, 2], [0, 3, 3]]
    assert longcat_rope_options(None, 512) == {"shift_t": 1.0, "shift_y": 512.0, "shift_x": 512.0}
    # ScaleROPE's own values win (ComfyUI's setdefault)
    assert longcat_rope_options({"shift_y": 3.0, "scale_x": 2.0}, 9) == {
        "shift_y": 3.0, "scale_x": 2.0, "shift_t": 1.0, "shift_x": 9.0}


def test_scale_rope_options_reach_the_network(loaded):
    from comfy_core.attention.rope import with_rope_options

    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(1, 16, 4, 4, generator=gen)
    context = torch.randn(1, 5, TINY_LONGCAT["joint_attention_dim"], generator=gen)
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        default = network(x, sigma, context)
        explicit = network(x, sigma, context, transformer_options=with_rope_options(
            None, shift_t=1.0, shift_y=5.0, shift_x=5.0))
        moved = network(x, sigma, context, transformer_options=with_rope_options(None, shift_y=0.0, shift_x=0.0))
    assert torch.equal(default, explicit)
    assert (default - moved).abs().max() > 1e-4


def test_bad_context_width_is_a_typed_error(loaded):
    with pytest.raises(ValueError, match="32"):
        loaded.model.diffusion_model(torch.zeros(1, 16, 4, 4), torch.tensor([0.5]), torch.zeros(1, 3, 20))


def test_family_policy(loaded):
    model = loaded.model
    family = model.family
    assert family.sampling.prediction == "flow" and family.sampling.schedule == "flux"
    assert family.sampling.shift == 1.15 and family.sampling.multiplier == 1.0
    assert family.geometry.latent_channels == 16 and family.latent_format.scale_factor == pytest.approx(0.3611)
    assert family.text_encoders.clip_types == ("longcat_image",)
    conditioning = family.conditioning
    assert conditioning.encode_adm(model, pooled_output=torch.zeros(1, 8)) is None
    assert conditioning.extra_conds(model, guidance=4.0) == {}  # FluxGuidance's value is dropped
    ref = torch.randn(1, 16, 4, 4)
    out = conditioning.extra_conds(model, guidance=4.5, reference_latents=[ref], reference_latents_method="index")
    assert set(out) == {"ref_latents", "ref_latents_method"} and out["ref_latents_method"] == "index"
    torch.testing.assert_close(out["ref_latents"][0], model.process_latent_in(ref))
    assert model.model_config.unet_config["txt_ids_dims"] == [1, 2]


def test_packs_see_comfyuis_classes(loaded):
    from compat.mp_model_base import Flux, LongCatImage
    from compat.mp_supported_models import our_config_class

    assert isinstance(loaded.model, LongCatImage) and isinstance(loaded.model, Flux)
    assert isinstance(loaded.model.model_config, our_config_class("LongCatImage"))


# --- the text encoder (CLIPLoader type "longcat_image") -------------------------------------------


def test_quotations_are_split_as_longcats():
    assert split_quotation("Please write 'Hello' on it") == [("Please write ", False), ("'Hello'", True),
                                                             (" on it", False)]
    assert split_quotation("don't say \u201cno\u201d") == [("don't say ", False), ("\u201cno\u201d", True)]
    assert split_quotation("it's Tom's") == [("it's Tom's", False)]


def test_conditioning_span_cuts_comfyuis_template():
    ids = [151644, 9, 151645, 198, 151644, 872, 198, 5, 6, 151643, 151645, 198, 151644, 77091, 198]
    pairs = [(i, 1.0) for i in ids]
    assert conditioning_span(pairs, len(ids)) == (7, 5)  # the prompt and its pad kept
    assert conditioning_span([(5, 1.0), (6, 1.0)], 2) == (0, 0)


@pytest.fixture(scope="module")
def te_state():
    from tests.fixtures.qwen25vl_files import tiny_qwen25vl_state_dict

    return tiny_qwen25vl_state_dict(seed=3)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, te_state):
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.qwen25vl_files import write_qwen25vl_file

    path = write_qwen25vl_file(tmp_path_factory.mktemp("longcat_te") / "qwen_2.5_vl_7b.safetensors", te_state)
    return load_text_encoders([path], "longcat_image")


def _pipeline_prompt_embeds(te_state, prompt: str) -> torch.Tensor:
    """diffusers' `LongCatImagePipeline._encode_prompt` on transformers' Qwen2.5-VL holding the file's
    (bf16-rounded) weights, with the Qwen tokenizer we ship (as a transformers fast tokenizer)."""
    from diffusers import LongCatImagePipeline
    from transformers import PreTrainedTokenizerFast

    from comfy_core.text_encoders.qwen_tokenizer import build_qwen_tokenizer
    from tests.fixtures.qwen25vl_files import reference_model as qwen_reference

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=build_qwen_tokenizer(), pad_token="<|endoftext|>")
    pipe = types.SimpleNamespace(
        tokenizer=tokenizer, tokenizer_max_length=512, device=torch.device("cpu"),
        text_encoder=qwen_reference({k: v.to(torch.bfloat16) for k, v in te_state.items()}),
        prompt_template_encode_prefix=LongCatImageTokenizer.T2I_PREFIX,
        prompt_template_encode_suffix=LongCatImageTokenizer.SUFFIX)
    with torch.no_grad():
        return LongCatImagePipeline._encode_prompt(pipe, [prompt])


def test_cliploader_longcat_image_matches_the_pipelines_prompt_encoding(clip, te_state):
    assert isinstance(clip.cond_stage_model, LongCatImageTEModel)
    assert isinstance(clip.tokenizer, LongCatImageTokenizer)
    prompt = 'A poster that says "LongCat" (bold:1.2), it\'s sunny'
    tokens = clip.tokenize(prompt)
    pairs = tokens["qwen25_7b"][0]
    assert {w for _, w in pairs} == {1.0}
    base = clip.tokenizer.qwen25_7b
    quoted = [i for char in '"LongCat"' for i in base.encode(char)]
    prompt_ids = base.encode("A poster that says ") + quoted + base.encode(" (bold:1.2), it's sunny")
    prefix, suffix = base.encode(LongCatImageTokenizer.T2I_PREFIX), base.encode(LongCatImageTokenizer.SUFFIX)
    assert [t for t, _ in pairs] == prefix + prompt_ids + [151643] * (512 - len(prompt_ids)) + suffix
    extra = clip.encode_from_tokens(tokens, return_dict=True)
    cond = extra["cond"]
    assert cond.shape == (1, 512, 256) and extra["pooled_output"] is None
    assert extra["attention_mask"].shape == (1, 512) and int(extra["attention_mask"].sum()) == len(prompt_ids)
    torch.testing.assert_close(cond, _pipeline_prompt_embeds(te_state, prompt), atol=1e-4, rtol=1e-4)


def test_an_empty_prompt_is_one_space(clip):
    base = clip.tokenizer.qwen25_7b
    ids = [t for t, _ in clip.tokenize("")["qwen25_7b"][0]]
    start = len(base.encode(LongCatImageTokenizer.T2I_PREFIX))
    assert ids[start:start + 2] == base.encode(" ") + [151643]


def test_edit_prompts_show_the_image_to_the_text_encoder(clip):
    """TextEncodeQwenImageEdit's `images`: the edit system turn, one vision block whose pad is the
    image entry; the conditioning is the image's vision tokens (with their start / end marks) and
    the 512 prompt positions."""
    image = torch.rand(1, 56, 56, 3)
    tokens = clip.tokenize("make it night", images=[image])
    pairs = tokens["qwen25_7b"][0]
    entries = [i for i, (t, _) in enumerate(pairs) if isinstance(t, dict)]
    assert len(entries) == 1 and torch.equal(pairs[entries[0]][0]["data"], image)
    base = clip.tokenizer.qwen25_7b
    head = base.encode(LongCatImageTokenizer.EDIT_PREFIX)
    assert [t for t, _ in pairs[:entries[0]]] == head[:head.index(151655)]
    cond = clip.encode_from_tokens(tokens, return_dict=True)["cond"]
    vision_tokens = cond.shape[1] - 512 - 2
    assert vision_tokens > 0 and cond.shape[-1] == 256
    text_only = clip.encode_from_tokens(clip.tokenize("make it night"), return_dict=True)["cond"]
    assert text_only.shape[1] == 512
