"""JoyImage Edit (comfy_core/families/joyimage): the network against diffusers' JoyImage transformers on
tiny random weights in ComfyUI's layout (the same names), ComfyUI's detection and policy (FLOW shift 1.5,
multiplier 1000, Wan 2.1 latents, reference latents), int8 ConvRot files, LoRA spellings, and CLIPLoader
type "joyimage" against transformers' Qwen3-VL (the last block's pre-norm states after the 34-token
system turn, the reference images through the vision tower with JoyImage's bicubic preprocessing)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.joyimage.dit import (JoyImageConfig, JoyImageConfigError, JoyImageInputError,
                                              JoyImageTransformer, rope_axes)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_joyimage import quantized_joyimage, tiny_joyimage_config, tiny_joyimage_state_dict

UNET = "model.diffusion_model."
CTX = 64  # the tiny Qwen3-VL's width


def _network(seed: int = 0) -> JoyImageTransformer:
    network = JoyImageTransformer(tiny_joyimage_config())
    network.load_state_dict(tiny_joyimage_state_dict(seed))
    return network.eval()


def _patches(latent: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """`[B, C, T, H, W]` -> diffusers' edit-plus input `[B, N, C, 1, 2, 2]` (tokens in t, h, w order)."""
    b, c, t, h, w = latent.shape
    patches = latent.reshape(b, c, t, 1, h // 2, 2, w // 2, 2).permute(0, 2, 4, 6, 1, 3, 5, 7)
    return patches.reshape(b, -1, c, 1, 2, 2), (t, h // 2, w // 2)


def test_the_network_is_diffusers_edit_plus_with_a_reference_of_another_size():
    """ComfyUI's per-component RoPE (frames continue, rows / columns restart) with base 10000 is diffusers'
    `JoyImageEditPlusTransformer3DModel` given the same component shapes; only the target comes out."""
    from diffusers import JoyImageEditPlusTransformer3DModel

    config = tiny_joyimage_config()
    reference = JoyImageEditPlusTransformer3DModel(
        patch_size=[1, 2, 2], in_channels=16, hidden_size=config.hidden_size,
        num_attention_heads=config.num_attention_heads, text_dim=CTX, mlp_width_ratio=4.0,
        num_layers=config.num_layers, rope_dim_list=list(rope_axes(config.head_dim)), theta=10000).eval()
    reference.load_state_dict(tiny_joyimage_state_dict(1), strict=True)
    network = _network(1)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 1, 6, 8, generator=generator)
    ref = torch.randn(1, 16, 1, 4, 10, generator=generator)
    context = torch.randn(1, 7, CTX, generator=generator)
    timestep = torch.tensor([730.0])
    with torch.no_grad():
        ours = network(x, timestep, context, ref_latents=[ref])
        (p1, s1), (p2, s2) = _patches(x), _patches(ref)
        theirs = reference(torch.cat([p1, p2], dim=1), timestep, context, shape_list=[[s1, s2]], return_dict=False)[0]
    t, h, w = s1
    theirs = theirs[:, :math.prod(s1)].reshape(1, t, h, w, 16, 1, 2, 2).permute(0, 4, 1, 5, 2, 6, 3, 7)
    theirs = theirs.reshape(1, 16, t, 2 * h, 2 * w)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()
    # a 4-D latent (one frame) is the same computation, returned 4-D
    with torch.no_grad():
        flat = network(x[:, :, 0], timestep, context, ref_latents=[ref[:, :, 0]])
    torch.testing.assert_close(flat, ours[:, :, 0])


def test_without_references_it_is_diffusers_joyimage_edit():
    from diffusers import JoyImageEditTransformer3DModel

    config = tiny_joyimage_config()
    reference = JoyImageEditTransformer3DModel(
        patch_size=[1, 2, 2], in_channels=16, out_channels=16, hidden_size=config.hidden_size,
        num_attention_heads=config.num_attention_heads, text_dim=CTX, mlp_width_ratio=4.0,
        num_layers=config.num_layers, rope_dim_list=list(rope_axes(config.head_dim)), theta=10000).eval()
    reference.load_state_dict(tiny_joyimage_state_dict(2), strict=True)
    generator = torch.Generator().manual_seed(1)
    x, context = torch.randn(2, 16, 1, 4, 6, generator=generator), torch.randn(2, 5, CTX, generator=generator)
    timestep = torch.tensor([100.0, 900.0])
    with torch.no_grad():
        ours = _network(2)(x, timestep, context)
        theirs = reference(x, timestep, context, return_dict=False)[0]
    assert (ours - theirs).abs().max() < 1e-4


def test_odd_sizes_are_padded_and_cropped_and_blocks_can_be_replaced():
    network = _network(3)
    generator = torch.Generator().manual_seed(2)
    x, context = torch.randn(1, 16, 1, 5, 7, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    with torch.no_grad():
        plain = network(x, torch.tensor([500.0]), context)
    assert plain.shape == x.shape and torch.isfinite(plain).all()
    seen = []

    def replace(args, extra):
        seen.append((args["transformer_options"]["block_index"], args["img"].shape, args["txt"].shape))
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 1): replace}}}
    with torch.no_grad():
        patched = network(x, torch.tensor([500.0]), context, transformer_options=options)
    assert torch.equal(patched, plain) and seen == [(1, (1, 12, 64), (1, 3, 64))]
    with pytest.raises(JoyImageInputError, match="CLIPLoader type 'joyimage'"):
        network(x, torch.tensor([500.0]), torch.zeros(1, 3, 32))


def test_detection_reads_comfyuis_unet_config():
    """ComfyUI's own detection test's shapes (the release's 40 blocks of 4096, heads of 128)."""
    header = {"img_in.weight": torch.empty(4096, 16, 1, 2, 2, device="meta"),
              "condition_embedder.time_embedder.linear_1.weight": torch.empty(4096, 256, device="meta"),
              "double_blocks.0.attn.img_attn_q_norm.weight": torch.empty(128, device="meta")}
    for i in range(40):
        header[f"double_blocks.{i}.attn.img_attn_qkv.weight"] = torch.empty(3 * 4096, 4096, device="meta")
    config = JoyImageConfig.detect_from_weights(header)
    assert config.comfy_unet_config() == {"image_model": "joyimage", "in_channels": 16, "hidden_size": 4096,
                                          "patch_size": [1, 2, 2], "num_layers": 40, "num_attention_heads": 32,
                                          "text_dim": 4096}
    assert rope_axes(config.head_dim) == (16, 56, 56) and config.theta == 10000
    state = tiny_joyimage_state_dict()
    assert JoyImageConfig.detect_from_weights(state) == tiny_joyimage_config()
    assert JoyImageConfig.detect_from_weights({UNET + k: v for k, v in state.items()}, UNET) == tiny_joyimage_config()
    del state["double_blocks.1.attn.img_attn_qkv.weight"]
    state = {k: v for k, v in state.items() if not k.startswith("double_blocks.0.")}
    with pytest.raises(JoyImageConfigError, match="img_attn_q_norm"):
        JoyImageConfig.detect_from_weights(state)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("joyimage") / "joyai_image_edit_bf16.safetensors"
    return load_diffusion_model(save(tiny_joyimage_state_dict(seed=4), path))


def test_unetloader_file_is_detected_with_comfyuis_policy(loaded):
    from comfy_core.families.errors import UnknownFamilyError
    from comfy_core.models.model_sampling import FlowModelSampling

    registry = default_registry()
    header = {UNET + k: v for k, v in tiny_joyimage_state_dict().items()}
    assert registry.detect(header).family.name == "joyimage"
    assert registry.detect_diffusion_model(header).family.name == "joyimage"
    without_time = {k: v for k, v in header.items() if "time_embedder.linear_1" not in k}
    with pytest.raises(UnknownFamilyError):  # ComfyUI's signature needs the time embedder too
        registry.detect(without_time)
    model = loaded.model
    assert model.family.name == "joyimage" and type(model.model_config).__name__ == "JoyImage"
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == pytest.approx(1.5)
    assert float(sampling.timestep(torch.tensor(0.25))) == pytest.approx(250.0)
    assert model.latent_format.channels == 16 and model.latent_format.latent_dimensions == 3
    unet_config = model.model_config.unet_config
    assert unet_config["image_model"] == "joyimage" and unet_config["theta"] == 10000
    assert unet_config["rope_dim_list"] == [16, 56, 56]
    family = registry.get("joyimage")
    assert family.comfy_model_class == "JoyImage" and family.text_encoders.clip_types == ("joyimage",)
    ref = torch.ones(1, 16, 1, 2, 2)
    conds = family.conditioning.extra_conds(model, reference_latents=[ref], attention_mask=torch.ones(1, 3))
    assert list(conds) == ["ref_latents"]
    assert torch.allclose(conds["ref_latents"][0], model.process_latent_in(ref))
    assert family.conditioning.extra_conds(model, cross_attn=torch.zeros(1, 3, CTX)) == {}


def test_int8_convrot_file_stays_quantized_and_computes_like_its_dequantised_weights(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    state = tiny_joyimage_state_dict(seed=5)
    shapes = {k: tuple(v.shape) for k, v in state.items() if v.dim() == 2}
    tensors, metadata = quantized_joyimage(state)
    path = tmp_path / "joyai_image_edit_int8_convrot.safetensors"
    save_file(tensors, str(path), metadata=metadata or None)
    quantised = load_diffusion_model(path)
    plain = load_diffusion_model(save(true_state(tensors, metadata, shapes), tmp_path / "f" / "joyai.safetensors"))
    network = quantised.model.diffusion_model
    assert network.double_blocks[0].attn.img_attn_qkv.weight.dtype == torch.int8
    generator = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 16, 1, 4, 4, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([500.0]), ctx) for m in (quantised, plain))
    assert (a - b).abs().max() < 1e-3 * b.abs().max()


def test_lora_spellings_reach_the_layers(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    qkv = "diffusion_model.double_blocks.1.attn.img_attn_qkv.weight"
    for name in ("diffusion_model.double_blocks.1.attn.img_attn_qkv", "lora_unet_double_blocks_1_attn_img_attn_qkv",
                 "transformer.double_blocks.1.attn.img_attn_qkv"):
        assert key_map[name] == qkv


# --- the Qwen3-VL 8B text encoder (CLIPLoader type "joyimage") --------------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    state = tiny_qwen3vl_state_dict(seed=7)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_8b_joyimage_edit.safetensors",
                              dtype=torch.float32, state=state)
    return state, load_text_encoders([path], "joyimage")


def _last_block(reference, ids: list[int], images: list[torch.Tensor]) -> torch.Tensor:
    """transformers' last decoder block output (before the final norm: a hook on the block, as diffusers'
    JoyImage pipeline reads it), the images' patches made by JoyImage's preprocessing."""
    from comfy_core.families.joyimage.clip import MAX_PIXELS, MIN_PIXELS
    from comfy_core.text_encoders.qwen3vl_vision import MEAN, STD, preprocess_image
    from tests.fixtures.qwen3vl_files import IMAGE_PAD

    kwargs = {}
    if images:
        prepared = [preprocess_image(image, reference.config.vision_config, MEAN, STD, min_pixels=MIN_PIXELS,
                                     max_pixels=MAX_PIXELS, mode="bicubic") for image in images]
        kwargs = dict(pixel_values=torch.cat([p for p, _ in prepared]),
                      image_grid_thw=torch.cat([g for _, g in prepared]),
                      mm_token_type_ids=torch.tensor([[1 if t == IMAGE_PAD else 0 for t in ids]]))
    captured = {}
    handle = reference.language_model.layers[-1].register_forward_hook(
        lambda _m, _i, out: captured.update(states=out[0] if isinstance(out, tuple) else out))
    try:
        with torch.no_grad():
            reference(input_ids=torch.tensor([ids]), **kwargs)
    finally:
        handle.remove()
    return captured["states"]


def _expanded(row: list, clip) -> tuple[list[int], list[torch.Tensor]]:
    """A token row's ids with each image entry replaced by its vision tokens' pads, and the images."""
    from comfy_core.families.joyimage.clip import MAX_PIXELS, MIN_PIXELS
    from comfy_core.text_encoders.qwen25vl_vision import resized_size
    from tests.fixtures.qwen3vl_files import IMAGE_PAD

    ids, images = [], []
    for pair in row:
        token = pair[0]
        if isinstance(token, dict):
            image = token["data"]
            height, width = resized_size(image.shape[1], image.shape[2], 32, MIN_PIXELS, MAX_PIXELS)
            ids.extend([IMAGE_PAD] * ((height // 32) * (width // 32)))
            images.append(image)
        else:
            ids.append(token)
    return ids, images


def test_cliploader_joyimage_text_prompt_is_the_last_block_after_the_system_turn(encoder):
    from comfy_core.families.joyimage.clip import DROP_IDX, TEMPLATE_TEXT, JoyImageTEModel, JoyImageTokenizer
    from tests.fixtures.qwen3vl_files import reference_model

    state, clip = encoder
    assert isinstance(clip.cond_stage_model, JoyImageTEModel) and isinstance(clip.tokenizer, JoyImageTokenizer)
    tokens = clip.tokenize("a red fox in the snow", thinking=False)
    (row,) = tokens["qwen3vl_8b"]
    ids = [pair[0] for pair in row]
    assert clip.tokenizer.decode(ids, skip_special_tokens=False) == TEMPLATE_TEXT.format("a red fox in the snow")
    # ComfyUI drops 34 tokens: the 33 of the system turn and the user turn's `<|im_start|>`
    assert ids[DROP_IDX - 2:DROP_IDX + 2] == [198, 151644, 872, 198]
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    expected = _last_block(reference_model(state), ids, [])[:, DROP_IDX:]
    assert out["pooled_output"] is None and out["cond"].shape == (1, len(ids) - DROP_IDX, CTX)
    assert out["attention_mask"].shape == (1, len(ids) - DROP_IDX) and bool(out["attention_mask"].all())
    torch.testing.assert_close(out["cond"], expected, atol=1e-4, rtol=1e-4)


def test_reference_images_go_through_the_vision_tower_bicubically(encoder):
    from comfy_core.families.joyimage.clip import DROP_IDX, TEMPLATE_IMAGE
    from tests.fixtures.qwen3vl_files import VISION_END, VISION_START, reference_model

    state, clip = encoder
    generator = torch.Generator().manual_seed(3)
    first, second = torch.rand(1, 40, 72, 3, generator=generator), torch.rand(1, 64, 64, 4, generator=generator)
    tokens = clip.tokenize("make it blue", images=[first, second])
    (row,) = tokens["qwen3vl_8b"]
    entries = [i for i, pair in enumerate(row) if isinstance(pair[0], dict)]
    assert len(entries) == 2 and [row[i][0]["data"] is img for i, img in zip(entries, (first, second))] == [True] * 2
    assert [row[entries[0] - 1][0], row[entries[0] + 1][0]] == [VISION_START, VISION_END]
    plain = [pair[0] if not isinstance(pair[0], dict) else 151655 for pair in row]
    assert clip.tokenizer.decode(plain, skip_special_tokens=False) == TEMPLATE_IMAGE.replace(
        "<|vision_start|><|image_pad|><|vision_end|>", "<|vision_start|><|image_pad|><|vision_end|>" * 2).format(
        "make it blue")
    ids, images = _expanded(row, clip)
    out = clip.encode_from_tokens(tokens, return_dict=True)
    expected = _last_block(reference_model(state), ids, images)[:, DROP_IDX:]
    assert out["cond"].shape == expected.shape  # 40x72 -> 256x448 (65,536 pixels at least): 112 vision tokens
    torch.testing.assert_close(out["cond"], expected, atol=1e-4, rtol=1e-4)


def test_a_prompt_without_the_template_is_refused(encoder):
    from comfy_core.families.joyimage.clip import JoyImagePromptError

    _state, clip = encoder
    with pytest.raises(JoyImagePromptError, match="34"):
        clip.encode_from_tokens(clip.tokenize("<|im_start|>user\nhi<|im_end|>\n"))


def test_the_joyimage_type_is_no_longer_refused():
    from comfy_core.split.clip_types import CLIP_LOADER_TYPES, NEEDS

    assert "joyimage" in CLIP_LOADER_TYPES and "joyimage" not in NEEDS
