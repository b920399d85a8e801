"""Text-encoder detection from checkpoint headers (names, shapes, dtypes only)."""
from __future__ import annotations

import pytest

from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.families import encoder_sets
from comfy_core.text_encoders import (
    ClipTextConfig,
    TextEncoderDetectionError,
    detect_text_encoders,
)


class _Info:
    def __init__(self, shape, dtype="F16"):
        self.shape = tuple(shape)
        self.dtype = dtype


def _with_garbage_data(src, dst):
    """Copy a safetensors file but overwrite its whole data section with garbage bytes."""
    raw = src.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    dst.write_bytes(raw[: 8 + n] + b"\xff" * (len(raw) - 8 - n))
    return dst


@pytest.mark.parametrize("fixture, expected", [
    ("tiny_sd1_ckpt", [("clip_l", "cond_stage_model.transformer.text_model.", "hf")]),
    ("tiny_sd2_ckpt", [("clip_h", "cond_stage_model.model.", "open_clip")]),
    ("tiny_sdxl_ckpt", [("clip_l", "conditioner.embedders.0.transformer.text_model.", "hf"),
                        ("clip_g", "conditioner.embedders.1.model.", "open_clip")]),
    ("tiny_sdxl_refiner_ckpt", [("clip_g", "conditioner.embedders.0.model.", "open_clip")]),
])
def test_detect_tiny_checkpoints_from_header_only(fixture, expected, request, tmp_path):
    path = _with_garbage_data(request.getfixturevalue(fixture), tmp_path / "garbage.safetensors")
    configs = detect_text_encoders(read_safetensors_header(path).tensors, encoder_sets())
    assert [(c.slot, c.prefix, c.layout) for c in configs] == expected
    for config in configs:
        assert (config.width, config.layers, config.vocab_size, config.max_positions) == (64, 3, 49408, 77)
        assert config.has_projection == (config.layout == "open_clip")


def _hf_tower(prefix, width=768, layers=12, dtype="F16"):
    t = {f"{prefix}embeddings.token_embedding.weight": _Info((49408, width), dtype),
         f"{prefix}embeddings.position_embedding.weight": _Info((77, width), dtype),
         f"{prefix}final_layer_norm.weight": _Info((width,), dtype)}
    for i in range(layers):
        t[f"{prefix}encoder.layers.{i}.mlp.fc1.weight"] = _Info((4 * width, width), dtype)
    return t


def _open_clip_tower(prefix, width=1024, layers=24, projection=1024):
    t = {f"{prefix}token_embedding.weight": _Info((49408, width)),
         f"{prefix}positional_embedding": _Info((77, width)),
         f"{prefix}ln_final.weight": _Info((width,)),
         f"{prefix}text_projection": _Info((width, projection))}
    for i in range(layers):
        t[f"{prefix}transformer.resblocks.{i}.attn.in_proj_weight"] = _Info((3 * width, width))
        t[f"{prefix}transformer.resblocks.{i}.mlp.c_fc.weight"] = _Info((4 * width, width))
    return t


def test_full_size_shapes_give_published_configs():
    sdxl = {**_hf_tower("conditioner.embedders.0.transformer.text_model."),
            **_open_clip_tower("conditioner.embedders.1.model.", 1280, 32, 1280)}
    clip_l, clip_g = detect_text_encoders(sdxl, encoder_sets())
    assert (clip_l.heads, clip_l.intermediate, clip_l.activation, clip_l.dtype) == (12, 3072, "quick_gelu", "F16")
    assert (clip_g.heads, clip_g.intermediate, clip_g.layers, clip_g.projection_dim, clip_g.activation) == \
        (20, 5120, 32, 1280, "gelu")
    (clip_h,) = detect_text_encoders(_open_clip_tower("cond_stage_model.model."), encoder_sets())
    assert (clip_h.slot, clip_h.heads, clip_h.layers) == ("clip_h", 16, 24)


def test_old_sd1_layout_without_text_model():
    (config,) = detect_text_encoders(_hf_tower("cond_stage_model.transformer."), encoder_sets())
    assert config.prefix == "cond_stage_model.transformer." and config.slot == "clip_l"


def test_default_slot_from_width_for_unknown_prefix():
    assert ClipTextConfig.detect_from_weights(_open_clip_tower("x.", 1280, 2, 1280), "x.").slot == "clip_g"
    assert ClipTextConfig.detect_from_weights(_open_clip_tower("x.", 1024, 2), "x.").slot == "clip_h"
    assert ClipTextConfig.detect_from_weights(_hf_tower("y.", 768, 2), "y.").slot == "clip_l"
    assert ClipTextConfig.detect_from_weights(_hf_tower("y.", 768, 2), "z.") is None


def test_no_text_encoder_gives_empty_list():
    assert detect_text_encoders({"model.diffusion_model.out.2.weight": _Info((4, 320, 3, 3))}, encoder_sets()) == []


def test_missing_layer_is_refused():
    tensors = _hf_tower("cond_stage_model.transformer.text_model.", 64, 4)
    del tensors["cond_stage_model.transformer.text_model.encoder.layers.2.mlp.fc1.weight"]
    with pytest.raises(TextEncoderDetectionError, match=r"layers \[2\] are missing"):
        detect_text_encoders(tensors, encoder_sets())


def test_inconsistent_shapes_are_refused():
    tensors = _open_clip_tower("cond_stage_model.model.", 64, 2, 64)
    tensors["cond_stage_model.model.positional_embedding"] = _Info((77, 32))
    with pytest.raises(TextEncoderDetectionError, match="positional_embedding"):
        detect_text_encoders(tensors, encoder_sets())
    tensors = _open_clip_tower("cond_stage_model.model.", 64, 2, 64)
    tensors["cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight"] = _Info((64, 64))
    with pytest.raises(TextEncoderDetectionError, match="in_proj_weight"):
        detect_text_encoders(tensors, encoder_sets())


def test_incomplete_tower_is_refused():
    tensors = _hf_tower("cond_stage_model.transformer.text_model.", 64, 2)
    del tensors["cond_stage_model.transformer.text_model.embeddings.position_embedding.weight"]
    with pytest.raises(TextEncoderDetectionError, match="position_embedding.weight.*missing"):
        detect_text_encoders(tensors, encoder_sets())


def test_unknown_encoder_combination_is_refused():
    tensors = {**_open_clip_tower("cond_stage_model.model.", 64, 2, 64),
               **_open_clip_tower("conditioner.embedders.1.model.", 64, 2, 64)}
    with pytest.raises(TextEncoderDetectionError, match="no known text-encoder set"):
        detect_text_encoders(tensors, encoder_sets())


@pytest.mark.parametrize("tower, prefix, stem", [
    (_hf_tower, "cond_stage_model.transformer.text_model.", "encoder.layers"),
    (_open_clip_tower, "cond_stage_model.model.", "transformer.resblocks"),
])
def test_tower_without_layers_is_refused_in_both_layouts(tower, prefix, stem):
    tensors = {k: v for k, v in tower(prefix, 64, 2).items() if stem not in k}
    with pytest.raises(TextEncoderDetectionError, match=rf"no {stem}\.N\.\* keys"):
        detect_text_encoders(tensors, encoder_sets())
    tensors = tower(prefix, 64, 2)
    tensors[next(k for k in tensors if "position" in k)] = _Info((77, 32))
    with pytest.raises(TextEncoderDetectionError, match=r"expected shape \(77, 64\), got \(77, 32\)"):
        detect_text_encoders(tensors, encoder_sets())
