"""CLIP vision encoders: detection from header shapes, loading (hf and OpenCLIP layouts, prefixes,
dtypes), ComfyUI's outputs against independent implementations (transformers' own models built
here from the same tensors, and a plain ViT forward on the raw OpenCLIP tensors), errors."""
from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.clip_vision.config import CLIP_MEAN, CLIP_STD, SIGLIP_MEAN, ClipVisionConfig, find_clip_vision
from comfy_core.clip_vision.load import clip_vision_from_checkpoint, load_clip_vision
from comfy_core.clip_vision.preprocess import clip_preprocess
from tests.fixtures.clip_vision import clip_vision_state_dict, write_tiny_clip_vision
from tests.fixtures.clips import one_thread  # noqa: F401 (autouse fixture)


def _pixels(batch: int = 2, size: int = 28, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _hf_clip_reference(tensors: dict, prefix: str = "", activation: str = "gelu"):
    """transformers' CLIPVisionModelWithProjection built here from the same tensors."""
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    width = tensors[f"{prefix}vision_model.post_layernorm.weight"].shape[0]
    layers = len({k.split(".")[3 + prefix.count(".")] for k in tensors if ".encoder.layers." in k})
    config = CLIPVisionConfig(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                              num_attention_heads=16, image_size=28, patch_size=14, hidden_act=activation,
                              layer_norm_eps=1e-5,
                              projection_dim=tensors[f"{prefix}visual_projection.weight"].shape[0])
    model = CLIPVisionModelWithProjection(config).eval()
    state = {k[len(prefix):]: v.float() for k, v in tensors.items()
             if k.startswith(prefix) and k[len(prefix):].startswith(("vision_model.", "visual_projection."))
             and not k.endswith("position_ids")}
    model.load_state_dict(state, strict=True)
    return model


# --- detection (header shapes only) -------------------------------------------------------------

class _Info:
    def __init__(self, *shape: int) -> None:
        self.shape = shape
        self.dtype = "F16"


def _header(kind: str, width: int, layers: int, positions: int, patch: int, projection: int | None,
            layout: str = "hf", prefix: str = "") -> dict:
    """The keys detection looks at, with the shapes of a released model (no tensor data)."""
    h: dict = {}
    if layout == "hf":
        v = f"{prefix}vision_model."
        h[f"{v}embeddings.patch_embedding.weight"] = _Info(width, 3, patch, patch)
        h[f"{v}embeddings.position_embedding.weight"] = _Info(positions, width)
        if kind == "clip":
            h[f"{v}embeddings.class_embedding"] = _Info(width)
            h[f"{prefix}visual_projection.weight"] = _Info(projection, width)
        else:
            h[f"{v}embeddings.patch_embedding.bias"] = _Info(width)
        for i in range(layers):
            h[f"{v}encoder.layers.{i}.layer_norm1.weight"] = _Info(width)
        h[f"{v}encoder.layers.0.mlp.fc1.weight"] = _Info(4 * width, width)
    else:
        h[f"{prefix}class_embedding"] = _Info(width)
        h[f"{prefix}conv1.weight"] = _Info(width, 3, patch, patch)
        h[f"{prefix}positional_embedding"] = _Info(positions, width)
        h[f"{prefix}proj"] = _Info(width, projection)
        for i in range(layers):
            h[f"{prefix}transformer.resblocks.{i}.attn.in_proj_weight"] = _Info(3 * width, width)
        h[f"{prefix}transformer.resblocks.0.mlp.c_fc.weight"] = _Info(4 * width, width)
    return h


@pytest.mark.parametrize("header, name, activation, size, projection", [
    (_header("clip", 1024, 24, 257, 14, 768), "CLIP ViT-L/14 (OpenAI)", "quick_gelu", 224, 768),
    (_header("clip", 1024, 24, 577, 14, 768), "CLIP ViT-L/14 (OpenAI)", "quick_gelu", 336, 768),
    (_header("clip", 1280, 32, 257, 14, 1024), "CLIP ViT-H/14 (OpenCLIP)", "gelu", 224, 1024),
    (_header("clip", 1664, 48, 257, 14, 1280), "CLIP ViT-bigG/14 (OpenCLIP)", "gelu", 224, 1280),
    (_header("siglip", 1152, 27, 729, 14, None), "SigLIP so400m", "gelu_pytorch_tanh", 384, None),
    (_header("siglip", 1152, 27, 1024, 16, None), "SigLIP so400m", "gelu_pytorch_tanh", 512, None),
    (_header("clip", 1280, 32, 257, 14, 1024, "open_clip", "embedder.model.visual."), "CLIP ViT-H/14 (OpenCLIP)",
     "gelu", 224, 1024),
    (_header("clip", 1024, 24, 257, 14, 768, "open_clip", "embedder.model.visual."), "CLIP ViT-L/14 (OpenAI)",
     "quick_gelu", 224, 768),
])
def test_released_models_are_detected_from_their_shapes(header, name, activation, size, projection):
    config = find_clip_vision(header)
    assert (config.name, config.activation, config.image_size, config.projection_dim) == (name, activation, size,
                                                                                           projection)
    assert config.heads == 16 and config.layer_norm_eps == 1e-5
    siglip = config.kind == "siglip"
    assert config.image_mean == (SIGLIP_MEAN if siglip else CLIP_MEAN)
    assert config.num_positions == (729 if size == 384 else 1024 if size == 512 else (size // 14) ** 2 + 1)


def test_prefixes_and_layouts_are_found_in_checkpoints():
    for layout, prefix in (("hf", ""), ("open_clip", "visual."), ("hf", "clip_vision."),
                           ("open_clip", "embedder.model.visual."), ("hf", "embedder.model.visual."),
                           ("open_clip", "conditioner.embedders.0.open_clip.model.visual."),
                           ("hf", "clip_l_vision.")):
        header = _header("clip", 64, 2, 5, 14, 16, layout, prefix)
        header["model.diffusion_model.input_blocks.0.0.weight"] = _Info(4, 4, 3, 3)
        config = find_clip_vision(header)
        assert (config.prefix, config.layout, config.width, config.layers) == (prefix, layout, 64, 2)
    assert find_clip_vision({"model.diffusion_model.x": _Info(1)}) is None


def test_inconsistent_towers_are_refused_by_detection():
    from comfy_core.clip_vision.config import ClipVisionDetectionError

    header = _header("clip", 64, 3, 5, 14, 16)
    del header["vision_model.encoder.layers.1.layer_norm1.weight"]
    with pytest.raises(ClipVisionDetectionError, match=r"layers \[1\] are missing"):
        find_clip_vision(header)
    with pytest.raises(ClipVisionDetectionError, match="not a square grid"):
        find_clip_vision(_header("clip", 64, 2, 6, 14, 16))
    with pytest.raises(ClipVisionDetectionError, match="divisible by 16"):
        find_clip_vision(_header("clip", 40, 2, 5, 14, 16))


# --- numerics against independent implementations -----------------------------------------------

def test_hf_clip_matches_transformers_built_from_the_same_tensors(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "cv.safetensors", position_ids=True)
    tensors = load_file(str(path))
    reference = _hf_clip_reference(tensors)
    tower = load_clip_vision(path, torch.float32).model
    pixels = _pixels()
    with torch.no_grad():
        ours = tower.encode(pixels)
        theirs = reference(pixel_values=pixels, output_hidden_states=True)
    assert torch.allclose(ours.image_embeds, theirs.image_embeds, atol=1e-5)
    assert torch.allclose(ours.last_hidden_state, theirs.last_hidden_state, atol=1e-5)
    # ComfyUI's penultimate: the output of the second-to-last layer (transformers' hidden_states[-2]).
    assert torch.allclose(ours.penultimate_hidden_states, theirs.hidden_states[-2], atol=1e-5)
    assert ours.mm_projected is None and not hasattr(ours, "all_hidden_states")


def test_quick_gelu_towers_match_transformers(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "cv.safetensors", seed=4)
    reference = _hf_clip_reference(load_file(str(path)), activation="quick_gelu")
    with CheckpointFile(path) as checkpoint:
        config = dataclasses.replace(find_clip_vision(checkpoint.tensors), activation="quick_gelu")
        tower = clip_vision_from_checkpoint(checkpoint, config, torch.float32).model
    pixels = _pixels(seed=1)
    with torch.no_grad():
        assert torch.allclose(tower.encode(pixels).image_embeds, reference(pixel_values=pixels).image_embeds, atol=1e-5)


def _open_clip_forward(t: dict, prefix: str, pixels: torch.Tensor, heads: int = 16):
    """A plain ViT forward on the raw OpenCLIP tensors (torch.nn.MultiheadAttention's packed
    in_proj, GELU MLP): (last tokens, penultimate tokens, projected pooled class token)."""
    p = {k[len(prefix):]: v.float() for k, v in t.items() if k.startswith(prefix)}
    width = p["class_embedding"].shape[0]
    x = F.conv2d(pixels, p["conv1.weight"], stride=p["conv1.weight"].shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([p["class_embedding"].expand(x.shape[0], 1, -1), x], dim=1) + p["positional_embedding"]
    x = F.layer_norm(x, (width,), p["ln_pre.weight"], p["ln_pre.bias"], 1e-5)
    states = []
    layers = len({k.split(".")[2] for k in p if k.startswith("transformer.resblocks.")})
    for i in range(layers):
        b = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (width,), p[b + "ln_1.weight"], p[b + "ln_1.bias"], 1e-5).transpose(0, 1)
        attn, _ = F.multi_head_attention_forward(
            h, h, h, width, heads, p[b + "attn.in_proj_weight"], p[b + "attn.in_proj_bias"], None, None, False, 0.0,
            p[b + "attn.out_proj.weight"], p[b + "attn.out_proj.bias"], need_weights=False)
        x = x + attn.transpose(0, 1)
        h = F.layer_norm(x, (width,), p[b + "ln_2.weight"], p[b + "ln_2.bias"], 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, p[b + "mlp.c_fc.weight"], p[b + "mlp.c_fc.bias"])),
                         p[b + "mlp.c_proj.weight"], p[b + "mlp.c_proj.bias"])
        states.append(x)
    pooled = F.layer_norm(x[:, 0], (width,), p["ln_post.weight"], p["ln_post.bias"], 1e-5)
    return x, states[-2], pooled @ p["proj"]


@pytest.mark.parametrize("prefix", ["visual.", "embedder.model.visual."])
def test_open_clip_layout_is_converted_exactly(tmp_path, prefix):
    extra = {"model.diffusion_model.out.2.bias": torch.zeros(4)} if prefix.startswith("embedder") else None
    path = write_tiny_clip_vision(tmp_path / "oc.safetensors", "clip", "open_clip", prefix, seed=2, extra=extra)
    clip_vision = load_clip_vision(path, torch.float32)
    assert (clip_vision.config.layout, clip_vision.config.prefix) == ("open_clip", prefix)
    pixels = _pixels(seed=3)
    with torch.no_grad():
        ours = clip_vision.model.encode(pixels)
    last, penultimate, embeds = _open_clip_forward(load_file(str(path)), prefix, pixels)
    assert torch.allclose(ours.last_hidden_state, last, atol=1e-5)
    assert torch.allclose(ours.penultimate_hidden_states, penultimate, atol=1e-5)
    assert torch.allclose(ours.image_embeds, embeds, atol=1e-5)


def test_siglip_matches_transformers_and_carries_all_hidden_states(tmp_path):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    path = write_tiny_clip_vision(tmp_path / "siglip.safetensors", "siglip", seed=5)
    tensors = load_file(str(path))
    config = SiglipVisionConfig(hidden_size=32, intermediate_size=128, num_hidden_layers=3, num_attention_heads=16,
                                image_size=28, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-5)
    reference = SiglipVisionModel(config).eval()  # with its pooling head, which ComfyUI does not use
    reference.load_state_dict({k[len("vision_model."):]: v for k, v in tensors.items()}, strict=True)
    clip_vision = load_clip_vision(path, torch.float32)
    assert clip_vision.config.kind == "siglip" and clip_vision.image_mean == [0.5, 0.5, 0.5]
    pixels = _pixels(seed=6)
    with torch.no_grad():
        ours = clip_vision.model.encode(pixels)
        theirs = reference(pixel_values=pixels, output_hidden_states=True)
    assert torch.allclose(ours.last_hidden_state, theirs.last_hidden_state, atol=1e-5)
    assert torch.equal(ours.image_embeds, ours.last_hidden_state)  # no projection: every token, normed
    assert torch.allclose(ours.all_hidden_states, torch.stack(theirs.hidden_states[1:], dim=1), atol=1e-5)
    assert torch.allclose(ours.penultimate_hidden_states, theirs.hidden_states[-2], atol=1e-5)


def test_llava_projector_and_one_layer_towers(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "llava.safetensors", mm_projection_dim=24, seed=7)
    t = load_file(str(path))
    pixels = _pixels(seed=8)
    with torch.no_grad():
        ours = load_clip_vision(path, torch.float32).model.encode(pixels)
    h = ours.penultimate_hidden_states[:, 1:]
    expected = F.linear(F.gelu(F.linear(h, t["multi_modal_projector.linear_1.weight"],
                                        t["multi_modal_projector.linear_1.bias"])),
                        t["multi_modal_projector.linear_2.weight"], t["multi_modal_projector.linear_2.bias"])
    assert ours.mm_projected.shape == (2, 4, 24) and torch.allclose(ours.mm_projected, expected, atol=1e-6)
    one = write_tiny_clip_vision(tmp_path / "one.safetensors", layers=1)
    with torch.no_grad():
        assert load_clip_vision(one, torch.float32).model.encode(pixels).penultimate_hidden_states is None


def test_half_storage_computes_in_float32_with_norms_and_projection_unrounded(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "cv.safetensors", seed=9)
    clip_vision = load_clip_vision(path, torch.float16)
    tower = clip_vision.model
    assert tower.vision_model.encoder.layers[0].mlp.fc1.weight.dtype == torch.float16
    for module in (tower.vision_model.pre_layrnorm, tower.vision_model.post_layernorm, tower.visual_projection):
        assert module.weight.dtype == torch.float32  # as ComfyUI builds these three
    tensors = load_file(str(path))
    rounded = {k: (v.half().float() if ".encoder." in k or ".embeddings." in k else v) for k, v in tensors.items()}
    reference = _hf_clip_reference(rounded)
    pixels = _pixels(seed=10)
    with torch.no_grad():
        ours = tower.encode(pixels)
        theirs = reference(pixel_values=pixels)
    assert ours.image_embeds.dtype == torch.float32
    assert torch.allclose(ours.image_embeds, theirs.image_embeds, atol=1e-5)


# --- preprocessing ------------------------------------------------------------------------------

def _reference_preprocess(image, size, mean, std, crop):
    """Written from ComfyUI's description: bicubic antialiased resize of the shortest side, centre
    crop (floored offsets), 8-bit quantisation, per-channel normalisation."""
    x = image[..., :3].permute(0, 3, 1, 2)
    h, w = x.shape[2:]
    if (h, w) != (size, size):
        target = (round(h * size / min(h, w)), round(w * size / min(h, w))) if crop else (size, size)
        x = F.interpolate(x, size=target, mode="bicubic", antialias=True)
        top, left = (x.shape[2] - size) // 2, (x.shape[3] - size) // 2
        x = x[:, :, top:top + size, left:left + size]
    x = (x * 255).clamp(0, 255).round() / 255
    return (x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]


@pytest.mark.parametrize("shape, crop", [((2, 45, 61, 3), True), ((1, 61, 45, 4), True), ((2, 45, 61, 3), False),
                                         ((1, 28, 28, 3), True), ((1, 14, 20, 3), True)])
def test_preprocessing_resizes_crops_and_normalises(shape, crop):
    image = torch.rand(*shape, generator=torch.Generator().manual_seed(11))
    out = clip_preprocess(image, 28, CLIP_MEAN, CLIP_STD, crop=crop)
    assert out.shape == (shape[0], 3, 28, 28)
    assert torch.allclose(out, _reference_preprocess(image, 28, CLIP_MEAN, CLIP_STD, crop), atol=1e-6)


def test_preprocessing_details_by_hand():
    # 45 x 61 -> shortest side 28: the other is round(61 * 28 / 45) = round(37.96) = 38; crop offset 5.
    from comfy_core.clip_vision.preprocess import resized_size

    assert resized_size(45, 61, 28, True) == (28, 38) and resized_size(45, 61, 28, False) == (28, 28)
    # A 28x28 image is not resized: values are only quantised and normalised.
    image = torch.full((1, 28, 28, 3), 0.5)
    out = clip_preprocess(image, 28, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert torch.allclose(out, torch.full_like(out, (128 / 255 - 0.5) / 0.25), atol=1e-6)  # 127.5 rounds to even


def test_encode_image_is_preprocessing_then_the_tower(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "cv.safetensors", seed=12)
    clip_vision = load_clip_vision(path, torch.float32)
    reference = _hf_clip_reference(load_file(str(path)))
    image = torch.rand(2, 50, 37, 3, generator=torch.Generator().manual_seed(13))
    for crop in (True, False):
        out = clip_vision.encode_image(image, crop=crop)
        pixels = _reference_preprocess(image, 28, CLIP_MEAN, CLIP_STD, crop)
        with torch.no_grad():
            expected = reference(pixel_values=pixels).image_embeds
        assert torch.allclose(out.image_embeds, expected, atol=1e-5)
        assert out["image_embeds"] is out.image_embeds  # ComfyUI's Output: by key and by attribute


# --- files, state dicts, errors -----------------------------------------------------------------

def test_get_sd_uses_hf_names_and_round_trips(tmp_path):
    path = write_tiny_clip_vision(tmp_path / "oc.safetensors", "clip", "open_clip", "visual.", seed=14)
    clip_vision = load_clip_vision(path, torch.float32)
    sd = clip_vision.get_sd()
    assert "vision_model.encoder.layers.0.self_attn.q_proj.weight" in sd and "visual_projection.weight" in sd
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "hf.safetensors"))
    again = load_clip_vision(tmp_path / "hf.safetensors", torch.float32)
    assert again.config.layout == "hf"
    pixels = _pixels(seed=15)
    with torch.no_grad():
        assert torch.equal(again.model.encode(pixels).image_embeds, clip_vision.model.encode(pixels).image_embeds)


def test_a_text_tower_beside_the_image_tower_is_left_unused(tmp_path, caplog):
    path = write_tiny_clip_vision(tmp_path / "full.safetensors", text_model=True, position_ids=True)
    with caplog.at_level(logging.WARNING):
        load_clip_vision(path, torch.float32)
    assert "4 unused tensors" in caplog.text and "logit_scale" in caplog.text


def test_bad_files_are_refused_with_typed_errors(tmp_path):
    save_file({"model.diffusion_model.x": torch.zeros(2)}, str(tmp_path / "none.safetensors"))
    with pytest.raises(MissingComponentError, match="not a CLIP vision model"):
        load_clip_vision(tmp_path / "none.safetensors")
    tensors = clip_vision_state_dict()
    del tensors["vision_model.encoder.layers.1.mlp.fc2.bias"]
    save_file(tensors, str(tmp_path / "missing.safetensors"))
    with pytest.raises(ShapeMismatchError, match="1 tensors missing.*layers.1.mlp.fc2.bias"):
        load_clip_vision(tmp_path / "missing.safetensors")
    tensors = clip_vision_state_dict()
    tensors["vision_model.encoder.layers.0.mlp.fc1.bias"] = torch.zeros(7)
    save_file(tensors, str(tmp_path / "shape.safetensors"))
    with pytest.raises(ShapeMismatchError, match="fc1.bias.*shape \\[7\\]"):
        load_clip_vision(tmp_path / "shape.safetensors")
    tensors = clip_vision_state_dict()
    del tensors["visual_projection.weight"]
    save_file(tensors, str(tmp_path / "noproj.safetensors"))
    with pytest.raises(ShapeMismatchError, match="visual_projection.weight"):
        load_clip_vision(tmp_path / "noproj.safetensors")


def test_config_builds_transformers_configs_without_downloads():
    header = _header("siglip", 1152, 27, 729, 14, None)
    config = ClipVisionConfig.detect_from_weights(header)
    hf = config.to_transformers()
    assert (hf.hidden_size, hf.image_size, hf.patch_size, hf.vision_use_head, hf.layer_norm_eps) == (
        1152, 384, 14, False, 1e-5)
