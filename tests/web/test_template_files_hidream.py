"""The tiny HiDream and Lumina 2 template files (tests/fixtures/template_models_hidream.py) are what
the templates' loaders read, and fit together: the HiDream DiT's text widths are the template
encoders' (CLIP-L + CLIP-G pooled, T5 states, one Llama state per block), and the NetaYume
all-in-one checkpoint is detected as Lumina 2 with its Gemma 2 encoder, tokenizer and VAE."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.fixtures.template_models import file_kind, provide_files


@pytest.mark.parametrize("folder, file_name, kind", [
    ("diffusion_models", "hidream_i1_fast_fp8.safetensors", "unet_hidream_fp8"),
    ("diffusion_models", "hidream_e1_1_bf16.safetensors", "unet_hidream"),
    ("text_encoders", "llama_3.1_8b_instruct_fp8_scaled.safetensors", "llama31_8b_fp8_scaled"),
    ("text_encoders", "llama_3.1_8b_instruct_fp8.safetensors", "llama31_8b_fp8"),
    ("text_encoders", "clip_g_hidream.safetensors", "clip_g"),
    ("text_encoders", "t5xxl_fp8_e4m3fn_scaled.safetensors", "t5xxl_fp8"),
    ("checkpoints", "NetaYumev35_pretrained_all_in_one.safetensors", "lumina2_checkpoint"),
])
def test_file_kinds(folder: str, file_name: str, kind: str) -> None:
    assert file_kind(folder, file_name) == kind


def test_the_hidream_files_load_and_encode_to_the_dits_widths(tmp_path: Path) -> None:
    from comfy_core.split import load_text_encoders
    from comfy_core.split.diffusion_model import load_diffusion_model

    names = ("clip_l_hidream.safetensors", "clip_g_hidream.safetensors", "t5xxl_fp8_e4m3fn_scaled.safetensors",
             "llama_3.1_8b_instruct_fp8_scaled.safetensors")
    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "hidream_i1_dev_fp8.safetensors"}},
              "2": {"class_type": "QuadrupleCLIPLoader",
                    "inputs": {f"clip_name{i}": name for i, name in enumerate(names, 1)}}}
    assert sorted(provide_files(prompt, tmp_path)) == [
        ("diffusion_models", "unet_hidream_fp8"), ("text_encoders", "clip_g"), ("text_encoders", "clip_l"),
        ("text_encoders", "llama31_8b_fp8_scaled"), ("text_encoders", "t5xxl_fp8")]
    models = tmp_path / "models"
    with safe_open(str(models / "text_encoders" / names[3]), "pt") as llama_file:  # the release's scaled fp8
        assert {"scaled_fp8", "model.layers.0.mlp.down_proj.scale_weight"} <= set(llama_file.keys())
        assert llama_file.get_tensor("model.layers.0.mlp.down_proj.weight").dtype == torch.float8_e4m3fn
    model = load_diffusion_model(models / "diffusion_models" / "hidream_i1_dev_fp8.safetensors")
    clip = load_text_encoders([models / "text_encoders" / n for n in names], "hidream")
    out = clip.encode_from_tokens(clip.tokenize("a cat"), return_dict=True)
    network = model.model.diffusion_model
    weights = dict(network.named_parameters())
    assert weights["p_embedder.pooled_embedder.linear_1.weight"].shape[1] == out["pooled_output"].shape[-1]
    t5 = len(network.caption_projection) - 1
    assert weights[f"caption_projection.{t5}.linear.weight"].shape[1] == out["cond"].shape[-1]
    llama = out["conditioning_llama3"]  # [1, states, T, width]: one state per block
    assert llama.shape[1] == t5 and weights["caption_projection.0.linear.weight"].shape[1] == llama.shape[-1]
    assert weights["x_embedder.proj.weight"].dtype == torch.float8_e4m3fn


def test_the_netayume_checkpoint_is_lumina2_with_its_gemma_tokenizer_and_vae(tmp_path: Path) -> None:
    from comfy_core.loading import load_checkpoint

    prompt = {"1": {"class_type": "CheckpointLoaderSimple",
                    "inputs": {"ckpt_name": "NetaYumev35_pretrained_all_in_one.safetensors"}}}
    assert provide_files(prompt, tmp_path) == [("checkpoints", "lumina2_checkpoint")]
    model, clip, vae = load_checkpoint(tmp_path / "models" / "checkpoints" /
                                       "NetaYumev35_pretrained_all_in_one.safetensors")
    assert model.model.family.name == "lumina2" and type(clip.cond_stage_model).__name__ == "LuminaModel"
    states = clip.encode_from_tokens(clip.tokenize("a photo of a cat"))
    assert states.shape[-1] == model.model.diffusion_model.cap_embedder[1].in_features
    image = vae.decode(torch.zeros(1, 16, 2, 2))
    assert image.shape == (1, 16, 16, 3)
