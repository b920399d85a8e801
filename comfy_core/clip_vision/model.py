"""`VisionTower`: a CLIP or SigLIP image encoder on transformers' modules, and its forward pass.

The modules are transformers' (`CLIPVisionModelWithProjection`'s `vision_model` and
`visual_projection`, or `SiglipVisionModel` without its pooling head), so the state dict has the
names of the "hf" files and of ComfyUI's `CLIPVisionModelProjection`. The forward pass is ours,
layer by layer, because ComfyUI's outputs (`comfy/clip_model.py`, `comfy/clip_vision.py: encode_image`)
need the state after the second-to-last layer, and so that each layer computes in float32 whatever
its weights are stored in (ComfyUI's `manual_cast`):

- CLIP: patch + class + position embeddings, pre-layer-norm, the encoder layers; `last_hidden_state`
  is the last layer's output (no final norm), `image_embeds` the class token through the
  post-layer-norm and `visual_projection`;
- SigLIP: patch + position embeddings, the encoder layers, the post-layer-norm over every token,
  which is both `last_hidden_state` and `image_embeds` (no projection); `all_hidden_states` stacks
  every layer's output `[B, layers, tokens, width]`;
- both: `penultimate_hidden_states` is the second-to-last layer's output (None for a one-layer
  tower, as in ComfyUI); `mm_projected` is the LLaVA projector over it without the class token,
  `linear_2(gelu(linear_1(x)))`, or None.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.clip_vision.config import KIND_CLIP, KIND_DINOV2, ClipVisionConfig
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.clip_vision.output import ClipVisionOutput

# Kept in float32 whatever the storage dtype: ComfyUI's `CLIPVision` builds these three without a
# dtype, so they hold the file's values unrounded.
FLOAT32_KEYS = ("vision_model.pre_layrnorm.", "vision_model.post_layernorm.", "visual_projection.")


class LlavaProjector(nn.Module):
    """LLaVA's two-layer projector from image tokens to a language model's width."""

    def __init__(self, width: int, out_dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(width, out_dim, bias=True)
        self.linear_2 = nn.Linear(out_dim, out_dim, bias=True)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(hidden[:, 1:])))  # [B, T-1, out_dim]


class VisionTower(nn.Module):
    """The image encoder `config` describes; build it on the meta device and assign its weights."""

    def __init__(self, config: ClipVisionConfig) -> None:
        super().__init__()
        self.config = config
        if config.kind == KIND_CLIP:
            from transformers import CLIPVisionModelWithProjection

            model = CLIPVisionModelWithProjection(config.to_transformers())
            self.vision_model = model.vision_model
            self.visual_projection = model.visual_projection
        else:
            from transformers import SiglipVisionModel

            self.vision_model = SiglipVisionModel(config.to_transformers())
            self.visual_projection = None
        self.multi_modal_projector = (LlavaProjector(config.width, config.mm_projection_dim)
                                      if config.mm_projection_dim is not None else None)

    @property
    def patch_weight(self) -> torch.Tensor:
        """The patch convolution's weight (where the tower's device and storage dtype are read)."""
        return self.vision_model.embeddings.patch_embedding.weight

    def reset_position_ids(self) -> None:
        """Give the non-persistent `position_ids` buffer (in no state dict, so still on the meta
        device after an assign-load) its values."""
        embeddings = self.vision_model.embeddings
        embeddings.position_ids = torch.arange(self.config.num_positions).expand((1, -1))

    def forward(self, pixel_values: torch.Tensor, attention_mask: None = None,
                intermediate_output: int | str | None = None) -> tuple:
        """ComfyUI's `CLIPVisionModelProjection` call (what IPAdapter_plus runs on
        `clip_vision.model`): `(last_hidden_state, intermediate, image_embeds, mm_projected)`.

        `intermediate_output`: -2 (or `len(layers) - 2`) gives the second-to-last layer's output,
        "all" every layer's stacked `[B, L, T, W]`, None gives None; other layers are refused."""
        if attention_mask is not None:
            raise ValueError("VisionTower: attention_mask is not supported (ComfyUI's vision towers take none)")
        output = self.encode(pixel_values)
        layers = self.config.layers
        if intermediate_output is None:
            intermediate = None
        elif intermediate_output == "all":
            intermediate = output["all_hidden_states"] if "all_hidden_states" in output.keys() else None
            if intermediate is None:
                raise ValueError("VisionTower: intermediate_output='all' is kept for SigLIP towers only")
        elif intermediate_output in (-2, layers - 2):
            intermediate = output["penultimate_hidden_states"]
        else:
            raise ValueError(f"VisionTower: intermediate_output={intermediate_output!r} is not supported "
                             "(-2, 'all' or None)")
        return output["last_hidden_state"], intermediate, output["image_embeds"], output["mm_projected"]

    def hidden_states(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """Normalised pixels `[B, 3, S, S]` -> every layer's output `[B, T, W]` (float32)."""
        vision = self.vision_model
        x = compute_in_float32(vision.embeddings, pixel_values.float())  # [B, T, W]
        if self.config.kind == KIND_CLIP:
            x = compute_in_float32(vision.pre_layrnorm, x)
        states: list[torch.Tensor] = []
        for layer in vision.encoder.layers:
            x = compute_in_float32(layer, x, None)
            states.append(x)
        return states

    def pooled(self, last_hidden_state: torch.Tensor) -> torch.Tensor:
        """A CLIP tower's pooled output `[B, W]`: the class token through the final LayerNorm
        (ComfyUI's `vision_model(...)[2]`, what the projections read)."""
        return compute_in_float32(self.vision_model.post_layernorm, last_hidden_state[:, 0, :])

    def encode(self, pixel_values: torch.Tensor) -> ClipVisionOutput:
        """Normalised pixels `[B, 3, S, S]` (S = the config's image size) -> ComfyUI's outputs, float32."""
        config = self.config
        vision = self.vision_model
        states = self.hidden_states(pixel_values)
        x = states[-1]
        penultimate = states[-2] if len(states) >= 2 else None
        output = ClipVisionOutput()
        if config.kind == KIND_CLIP:
            output["last_hidden_state"] = x
            output["image_embeds"] = compute_in_float32(self.visual_projection, self.pooled(x))  # [B, P]
            output["penultimate_hidden_states"] = penultimate
        else:
            x = compute_in_float32(vision.post_layernorm, x)
            output["last_hidden_state"] = x
            output["image_embeds"] = x
            output["all_hidden_states"] = torch.stack(states, dim=1)  # [B, L, T, W]
            output["penultimate_hidden_states"] = penultimate
        output["mm_projected"] = None
        if self.multi_modal_projector is not None and penultimate is not None:
            output["mm_projected"] = compute_in_float32(self.multi_modal_projector, penultimate)
        return output


class DinoVisionTower(nn.Module):
    """A DINOv2 image encoder as ComfyUI's clip vision runs it (`comfy/image_encoders/dino2.py`,
    Hunyuan3D's conditioning): our `models/dinov2.py` backbone in the file's names; ComfyUI's
    outputs are `last_hidden_state` = every token through the final LayerNorm, `image_embeds` its
    class token, `penultimate_hidden_states` the second-to-last block's output (no norm),
    `mm_projected` None. Each block computes in float32 whatever its weights are stored in."""

    def __init__(self, config: ClipVisionConfig) -> None:
        super().__init__()
        from comfy_core.models.dinov2 import Dinov2Config, _Embeddings, _Encoder

        self.config = config
        backbone = Dinov2Config(hidden_size=config.width, num_layers=config.layers, num_heads=config.heads,
                                position_grid=config.image_size // config.patch_size,
                                swiglu=config.activation == "swiglu", layer_norm_eps=config.layer_norm_eps,
                                patch_size=config.patch_size)
        self.embeddings = _Embeddings(backbone)
        self.encoder = _Encoder(backbone)
        self.layernorm = nn.LayerNorm(config.width, eps=config.layer_norm_eps)

    @property
    def patch_weight(self) -> torch.Tensor:
        return self.embeddings.patch_embeddings.projection.weight

    def reset_position_ids(self) -> None:
        """No non-persistent buffers to restore."""

    def forward(self, pixel_values: torch.Tensor, attention_mask: None = None,
                intermediate_output: int | str | None = None) -> tuple:
        """ComfyUI's `Dinov2Model` call: `(last_hidden_state, intermediate, pooled, None)`."""
        output = self.encode(pixel_values)
        intermediate = output["penultimate_hidden_states"] if intermediate_output in (-2, self.config.layers - 2) \
            else None
        return output["last_hidden_state"], intermediate, output["image_embeds"], None

    def encode(self, pixel_values: torch.Tensor) -> ClipVisionOutput:
        """Normalised pixels `[B, 3, S, S]` -> ComfyUI's outputs, float32."""
        x = compute_in_float32(self.embeddings, pixel_values.float())  # [B, 1 + N, W]
        states: list[torch.Tensor] = []
        for block in self.encoder.layer:
            x = compute_in_float32(block, x)
            states.append(x)
        x = compute_in_float32(self.layernorm, x)
        output = ClipVisionOutput()
        output["last_hidden_state"] = x
        output["image_embeds"] = x[:, 0, :]
        output["penultimate_hidden_states"] = states[-2] if len(states) >= 2 else None
        output["mm_projected"] = None
        return output


def tower_for(config: ClipVisionConfig) -> nn.Module:
    """The module for `config`'s kind (built on the meta device by the loader)."""
    return DinoVisionTower(config) if config.kind == KIND_DINOV2 else VisionTower(config)
