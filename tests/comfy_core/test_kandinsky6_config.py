"""Kandinsky 6's DiT configuration from tensor names and shapes (ComfyUI's
comfy/ldm/kandinsky6/detection.py), on tiny files with the release's names and diffusers'."""
from __future__ import annotations

import pytest

from comfy_core.families.kandinsky6.config import Kandinsky6Config, Kandinsky6ConfigError, is_kandinsky6, native_key
from tests.fixtures.template_models_kandinsky6 import diffusers_names, tiny_kandinsky6_state_dict


def test_sizes_come_from_the_weights():
    state = tiny_kandinsky6_state_dict(prefix="model.diffusion_model.")
    assert is_kandinsky6(state, "model.diffusion_model.") and not is_kandinsky6(state, "")
    cfg = Kandinsky6Config.detect_from_weights(state, "model.diffusion_model.")
    assert (cfg.model_dim, cfg.model_dim_a, cfg.time_dim, cfg.time_dim_a) == (48, 32, 24, 16)
    assert (cfg.ff_dim, cfg.ff_dim_a, cfg.head_dim, cfg.head_dim_a) == (64, 40, 16, 16)
    assert (cfg.in_text_dim, cfg.in_text_dim2, cfg.in_visual_dim, cfg.in_audio_dim) == (20, 12, 16, 40)
    assert (cfg.n_grid, cfg.num_text_blocks, cfg.num_visual_blocks, cfg.visual_token_types) == (1, 2, 2, 2)
    assert cfg.cross_gates is True


def test_released_rope_axes():
    assert Kandinsky6Config.detect_from_weights(tiny_kandinsky6_state_dict(head=128)).axes_dims == (32, 48, 48)
    assert Kandinsky6Config.detect_from_weights(tiny_kandinsky6_state_dict(head=64)).axes_dims == (16, 24, 24)


def test_t2va_without_token_types_and_piflow_grids():
    cfg = Kandinsky6Config.detect_from_weights(tiny_kandinsky6_state_dict(token_types=0, n_grid=3, blocks=3))
    assert (cfg.visual_token_types, cfg.n_grid, cfg.num_visual_blocks) == (0, 3, 3)


def test_diffusers_layout_reads_the_same():
    state = tiny_kandinsky6_state_dict()
    converted = diffusers_names(state)
    assert "visual_transformer_blocks.0.video_dec_block.attn.to_query.weight" in converted
    assert "video_time_embeddings.timestep_embedder.linear_1.weight" in converted
    assert {native_key(n) for n in converted} == set(state)
    assert is_kandinsky6(converted)
    assert Kandinsky6Config.detect_from_weights(converted) == Kandinsky6Config.detect_from_weights(state)


def test_inconsistent_weights_are_refused():
    state = tiny_kandinsky6_state_dict()
    del state["visual_blocks.0.va_cross_attention.to_key.weight"]
    assert not is_kandinsky6(state)
    with pytest.raises(Kandinsky6ConfigError, match="missing"):
        Kandinsky6Config.detect_from_weights(state)
    state = tiny_kandinsky6_state_dict()
    state["audio_outLayer.out_layer.weight"] = state["audio_outLayer.out_layer.weight"][:20]
    with pytest.raises(Kandinsky6ConfigError, match="audio output"):
        Kandinsky6Config.detect_from_weights(state)
