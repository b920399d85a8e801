"""LTX-Video 0.9.x files whose `config` metadata has a `transformer` section (0.9.5+'s files):
read as ComfyUI's model_detection merges it (comfy_core/families/ltxv/dit.py
`LTXVConfig.detect_from_weights(..., metadata)`): the RoPE switches and a head layout are taken,
widths must agree with the weights, and `unet_config` carries the section's entries."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.families.ltxv.dit import LTXVConfig, LTXVConfigError, LTXVModel
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.ltxv_files import CAPTION, INNER, tiny_ltxv_state_dict


def _metadata(**transformer):
    return {"config": json.dumps({"transformer": transformer})}


def test_metadata_switches_and_heads_are_read():
    state = tiny_ltxv_state_dict()
    plain = LTXVConfig.detect_from_weights(state)
    assert not plain.causal_temporal_positioning and plain.comfy_unet_config().keys() == {
        "image_model", "num_layers", "attention_head_dim", "cross_attention_dim", "in_channels", "caption_channels"}
    config = LTXVConfig.detect_from_weights(state, "", _metadata(
        causal_temporal_positioning=True, positional_embedding_theta=5000.0,
        positional_embedding_max_pos=[10, 512, 512],
        num_attention_heads=16, attention_head_dim=INNER // 16, caption_channels=CAPTION, qk_norm="rms_norm"))
    assert config.causal_temporal_positioning and config.positional_embedding_theta == 5000.0
    assert config.positional_embedding_max_pos == (10, 512, 512)
    assert (config.num_attention_heads, config.attention_head_dim) == (16, INNER // 16)
    unet = config.comfy_unet_config()
    assert unet["causal_temporal_positioning"] is True and unet["qk_norm"] == "rms_norm"
    assert unet["image_model"] == "ltxv" and unet["attention_head_dim"] == INNER // 16


@pytest.mark.parametrize("transformer, message", [
    ({"caption_channels": 4096}, "caption_channels 4096"),
    ({"num_attention_heads": 16}, "not 16 heads"),
    ({"num_layers": 28}, "num_layers 28"),
])
def test_metadata_that_contradicts_the_weights_is_refused(transformer, message):
    with pytest.raises(LTXVConfigError, match=message):
        LTXVConfig.detect_from_weights(tiny_ltxv_state_dict(), "", _metadata(**transformer))


def test_metadata_that_is_not_json_is_refused():
    with pytest.raises(LTXVConfigError, match="not JSON"):
        LTXVConfig.detect_from_weights(tiny_ltxv_state_dict(), "", {"config": "{"})


def test_loaded_file_uses_its_metadata(tmp_path):
    path = tmp_path / "ltxv.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_ltxv_state_dict().items()}, str(path),
              metadata=_metadata(causal_temporal_positioning=True, caption_channels=CAPTION))
    patcher = load_diffusion_model(path)
    assert patcher.model.diffusion_model.causal_temporal_positioning is True
    assert patcher.model.model_config.unet_config["causal_temporal_positioning"] is True


def test_unet_config_of_a_095_file_builds_the_network():
    """A pack may build `LTXVModel(**unet_config)`: the entries of a 0.9.5 file's transformer
    section (ComfyUI's LTXVModel takes them as **kwargs) do not make it another LTX network."""
    config = LTXVConfig.detect_from_weights(tiny_ltxv_state_dict(), "", _metadata(
        _class_name="Transformer3DModel", activation_fn="gelu-approximate", attention_bias=True,
        caption_channels=CAPTION, norm_eps=1e-6, num_embeds_ada_norm=1000, out_channels=128,
        project_to_2d_pos=True, qk_norm="rms_norm", standardization_norm="rms_norm",
        positional_embedding_type="rope", timestep_scale_multiplier=1000, causal_temporal_positioning=True))
    with torch.device("meta"):
        model = LTXVModel(**config.comfy_unet_config())
    assert model.causal_temporal_positioning is True
    with pytest.raises(LTXVConfigError, match="cross_attention_adaln"):
        LTXVModel(**config.comfy_unet_config(), cross_attention_adaln=True)
