"""LoRA key maps derived from module names: the LDM -> diffusers UNet names agree with diffusers'
own converter (test-only oracle) on every weight, for SD1, SD2 and SDXL layouts."""
from __future__ import annotations

import pytest
import torch

from comfy_core.lora import unet_diffusers_names
from tests.fixtures.checkpoints import tiny_state_dict
from tests.fixtures.diffusers_oracle import diffusers_unet

PREFIX = "model.diffusion_model."


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_unet_diffusers_names_match_diffusers_converter(family):
    sd = tiny_state_dict(family)
    ldm = {k[len(PREFIX):]: v for k, v in sd.items() if k.startswith(PREFIX)}
    reference = diffusers_unet(family, sd).state_dict()
    mapping = unet_diffusers_names(ldm)
    weights = [k[: -len(".weight")] for k in ldm if k.endswith(".weight")]
    assert sorted(mapping) == sorted(weights)  # every weight gets a name
    for ldm_name, diffusers_name in mapping.items():
        theirs = reference[diffusers_name + ".weight"]
        # Same tensor under the name diffusers gave it (1x1 convs may be stored as linear there).
        assert torch.equal(theirs.reshape(ldm[ldm_name + ".weight"].shape), ldm[ldm_name + ".weight"]), ldm_name
    assert len(set(mapping.values())) == len(mapping)  # no two LDM weights share a name


def test_sdxl_text_encoder_names_on_the_real_encoder_set():
    from comfy_core.lora import text_encoder_key_map
    from comfy_core.families import encoder_set_for, encoder_sets
    from comfy_core.text_encoders import build_clip, detect_text_encoders

    class Header:
        def __init__(self, tensor: torch.Tensor) -> None:
            self.shape, self.dtype = tuple(tensor.shape), "F32"

    sd = tiny_state_dict("sdxl")
    configs = detect_text_encoders({k: Header(v) for k, v in sd.items()}, encoder_sets())
    clip = build_clip(configs, sd, spec=encoder_set_for(configs))
    key_map = text_encoder_key_map(clip.patcher.model)
    params = {n for n, _ in clip.patcher.model.named_parameters()}
    layer = "text_model.encoder.layers.0.self_attn.q_proj"
    assert key_map["lora_te1_" + layer.replace(".", "_")] == f"clip_l.transformer.{layer}.weight"
    assert key_map["lora_te2_" + layer.replace(".", "_")] == f"clip_g.transformer.{layer}.weight"
    assert key_map["text_encoder_2." + layer] == f"clip_g.transformer.{layer}.weight"
    assert set(key_map.values()) <= params
