"""Lotus (He et al. 2024, "Lotus: Diffusion-based Visual Foundation Model for High-quality Dense
Prediction", arXiv 2409.18124): depth and normal estimation with an SD2-derived UNet.

Lotus runs its UNet with a fixed text conditioning: its frozen text encoder (SD 2's OpenCLIP
ViT-H/14 tower) applied to the null prompt, unpadded, i.e. the start and end tokens: a
`[1, 2, 1024]` tensor. Today's ComfyUI `LotusConditioning` node (comfy_extras/nodes_lotus.py)
returns that tensor as a constant instead of shipping and running the encoder; the same values are
stored here as data (data/lotus_null_prompt.safetensors, float16, exact: every value is a float16
number; data/PROVENANCE.md says where they come from).

The Lotus-D UNet (Comfy-Org's `lotus-depth-d-v1-1.safetensors`, a diffusion-model file; ComfyUI's
`LotusD` config and `Lotus` model) is SD 2.1's UNet with a 4-wide label embedding: the task switch,
which ComfyUI always feeds `[sin 1, sin 0, cos 1, cos 0]` (`LotusConditions`). It is sampled as an
image-to-image predictor (ComfyUI's `IMG_TO_IMG`: the latent goes in unscaled, the output is the
clean prediction), in one step from sigma 999 on the encoded image (the official template:
`SetFirstSigma`, `DisableNoise`). Detected as ComfyUI does: an SD 2 UNet whose label embedding
takes 4 inputs (`lotus_d_definition`); its files carry no text encoder.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from comfy_core.families.base import Family, SamplingPolicy
from comfy_core.models.model_conditions import ModelConditions

DATA = Path(__file__).resolve().parent / "data" / "lotus_null_prompt.safetensors"
KEY = "lotus_null_prompt"
SHAPE = (1, 2, 1024)  # [batch, tokens (start, end), OpenCLIP ViT-H width]


class LotusDataError(RuntimeError):
    """The stored null-prompt embedding is missing or not the `[1, 2, 1024]` tensor it should be."""


def null_prompt_embedding() -> torch.Tensor:
    """Lotus's text conditioning, `[1, 2, 1024]` float32 on the CPU (a new tensor per call)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    try:
        tensor = load_tensor_file(DATA)[0][KEY]
    except (CheckpointError, OSError, KeyError) as exc:
        raise LotusDataError(f"the Lotus null-prompt embedding cannot be read from {DATA}: {exc}") from exc
    if tuple(tensor.shape) != SHAPE:
        raise LotusDataError(f"{DATA.name}: expected shape {SHAPE}, found {tuple(tensor.shape)}")
    return tensor.to(torch.float32)


# Lotus-D's one task: ComfyUI's `Lotus.extra_conds` builds the label input from the task id [1, 0]
# as [sin(1), sin(0), cos(1), cos(0)].
TASK_IDS = (1.0, 0.0)
LABEL_WIDTH = 2 * len(TASK_IDS)


class LotusConditions(ModelConditions):
    """Lotus-D: `y` is the task embedding `[1, 4]`, whatever the conditioning entry holds."""

    name = "lotus"

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device") or model._device()
        task = torch.tensor(TASK_IDS, dtype=torch.float32, device=device)
        return torch.cat([torch.sin(task), torch.cos(task)]).unsqueeze(0)


def lotus_d_definition() -> Family:
    """The Lotus-D family: SD 2's family with a 4-wide label embedding, the task conditioning and
    image-to-image sampling; alone (a split file) it outranks SD 2.1 unCLIP, the other SD 2 UNet
    with a label embedding, by the embedding's width."""
    from comfy_core.families import sd2
    from comfy_core.families.sd2 import supported_models

    base = sd2.definition()
    unet = tuple((k, True if k == "has_adm" else v) for k, v in base.signature.unet)
    return dataclasses.replace(
        base, name="lotus_d", display_name="Lotus-D (SD 2 depth / normal estimator)",
        signature=dataclasses.replace(
            base.signature, required_prefixes=("model.diffusion_model.input_blocks.0.0.",),
            unet=unet + (("adm_in_channels", LABEL_WIDTH),),
            diffusion_model=(("levels", 4), ("attention_at_first_level", True), ("adm_in_channels", LABEL_WIDTH))),
        conditioning=LotusConditions(),
        # ComfyUI's LotusD builds its model as IMG_TO_IMG whatever the weights (no v / eps test)
        sampling=SamplingPolicy(prediction="img_to_img"), prediction_from_weights=None,
        supported_model=supported_models.LotusD, comfy_model_class="Lotus",
    )
