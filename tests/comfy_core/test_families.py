"""Model families: detection from names and shapes, the registry's refusals, prediction type."""
from __future__ import annotations

import dataclasses
import os
import struct

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.families.errors import AmbiguousFamilyError, UnknownFamilyError
from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.loading import resolve_prediction
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families import FamilyRegistrationError, FamilyRegistry, default_registry
from comfy_core.families import sd1


@pytest.mark.parametrize("fixture, family, depth, linear, adm", [
    ("tiny_sd1_ckpt", "sd1", (1, 1, 1, 1, 1, 1, 0, 0), False, None),
    ("tiny_sd2_ckpt", "sd2", (1, 1, 1, 1, 1, 1, 0, 0), True, None),
    ("tiny_sd2v_ckpt", "sd2", (1, 1, 1, 1, 1, 1, 0, 0), True, None),
    ("tiny_sdxl_ckpt", "sdxl", (0, 0, 1, 1, 2, 2), True, 64 + 6 * 256),
    ("tiny_sdxl_refiner_ckpt", "sdxl_refiner", (0, 0, 1, 1, 1, 1, 0, 0), True, 64 + 5 * 256),
])
def test_detects_each_family_from_the_header(request, fixture, family, depth, linear, adm):
    path = request.getfixturevalue(fixture)
    # Detection gets only the header's TensorInfo objects: no tensor data can be read.
    detection = default_registry().detect(read_safetensors_header(path).tensors, path)
    assert detection.family.name == family
    config = detection.unet_config
    assert config.transformer_depth == depth
    assert config.use_linear_in_transformer is linear
    assert config.adm_in_channels == adm
    heads = (8, -1) if family == "sd1" else (-1, 64)
    assert (config.num_heads, config.num_head_channels) == heads


def test_detection_works_on_a_file_whose_data_is_garbage(tmp_path, tiny_sdxl_ckpt):
    raw = bytearray(tiny_sdxl_ckpt.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    raw[8 + n:] = os.urandom(len(raw) - 8 - n)
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(bytes(raw))
    with CheckpointFile(path) as ckpt:
        assert default_registry().detect(ckpt.tensors, path).family.name == "sdxl"


def test_sdxl_per_level_depths_on_the_output_side(tiny_sdxl_ckpt):
    config = default_registry().detect(read_safetensors_header(tiny_sdxl_ckpt).tensors).unet_config
    assert config.transformer_depth_output == (2, 2, 2, 1, 1, 1, 0, 0, 0)
    assert config.transformer_depth_middle == 2
    assert config.channel_mult == (1, 1, 2) and config.context_dim == 128


def test_unknown_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "lora.safetensors"
    save_file({"lora_unet_down.lora_up.weight": torch.zeros(4, 1)}, str(path))
    with pytest.raises(UnknownFamilyError) as err:
        default_registry().detect(read_safetensors_header(path).tensors, path)
    assert "lora.safetensors" in str(err.value) and "sd1" in str(err.value)


def test_unet_without_its_text_encoder_matches_no_family(tiny_sd1_ckpt, tmp_path):
    tensors = {k: v for k, v in read_safetensors_header(tiny_sd1_ckpt).tensors.items()
               if not k.startswith("cond_stage_model.")}
    with pytest.raises(UnknownFamilyError):
        default_registry().detect(tensors, "x.safetensors")


def test_registry_refuses_duplicate_names_and_equal_signatures():
    registry = default_registry()
    with pytest.raises(FamilyRegistrationError, match="already registered"):
        registry.register(sd1.definition())
    twin = dataclasses.replace(sd1.definition(), name="sd1_twin")
    with pytest.raises(FamilyRegistrationError, match="same detection signature"):
        registry.register(twin)
    assert "sd1_twin" not in registry


def test_overlapping_families_make_detection_ambiguous(tiny_sd1_ckpt):
    base = sd1.definition()
    looser = dataclasses.replace(base, name="sd1_loose",
                                 signature=dataclasses.replace(base.signature, unet=()))
    registry = FamilyRegistry([base, looser])
    with pytest.raises(AmbiguousFamilyError, match="sd1, sd1_loose"):
        registry.detect(read_safetensors_header(tiny_sd1_ckpt).tensors, tiny_sd1_ckpt)


def test_adding_a_family_is_one_registration(tiny_sd1_ckpt):
    registry = FamilyRegistry()
    with pytest.raises(UnknownFamilyError):
        registry.detect(read_safetensors_header(tiny_sd1_ckpt).tensors)
    registry.register(sd1.definition())
    assert registry.detect(read_safetensors_header(tiny_sd1_ckpt).tensors).family.name == "sd1"


def test_sd2_prediction_from_the_marker_tensor(tiny_sd2_ckpt, tiny_sd2v_ckpt):
    family = default_registry().get("sd2")
    with CheckpointFile(tiny_sd2_ckpt) as eps, CheckpointFile(tiny_sd2v_ckpt) as v:
        assert resolve_prediction(eps, family, None) == "eps"
        assert resolve_prediction(v, family, None) == "v"
        assert resolve_prediction(v, family, "eps") == "eps"  # an explicit option wins


def test_prediction_metadata_wins_over_weights(tmp_path, tiny_sd2v_ckpt):
    from safetensors.torch import load_file

    path = tmp_path / "declared.safetensors"
    save_file(load_file(str(tiny_sd2v_ckpt)), str(path), metadata={"modelspec.prediction_type": "epsilon"})
    with CheckpointFile(path) as ckpt:
        assert resolve_prediction(ckpt, default_registry().get("sd2"), None) == "eps"
