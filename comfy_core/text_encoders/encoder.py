"""`ClipTextEncoder`: one CLIP text tower on our `ClipTextModelWithProjection` (clip_text_model.py,
transformers' module and parameter names).

The forward pass here drives the tower layer by layer: it lets us (a) replace token embeddings
at chosen positions (textual inversion), (b) take the hidden state of any layer, optionally
through the final layer norm (clip skip; SDXL's un-normalised penultimate layer), and (c) pool at
the first EOS, as ComfyUI's `comfy/clip_model.py` and the original CLIP do (Radford et al. 2021:
the EOS token's final, layer-normed state, then the text projection).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.config import ClipTextConfig
from comfy_core.text_encoders.clip_text_model import ClipTextModelWithProjection
from comfy_core.text_encoders.convert import convert_state_dict
from comfy_core.text_encoders.errors import TextEncoderKeyError, TokenizeError
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids, encode_weighted_chunks
from comfy_core.text_encoders.tower_options import TowerOptions


log = logging.getLogger(__name__)

EOS_ID = 49407


@dataclass(frozen=True)
class EncoderOutput:
    hidden: torch.Tensor  # [B, T, width] float32: the selected layer's states
    pooled: torch.Tensor  # [B, projection_dim] float32 (or [B, width] when unprojected)


def resolve_layer(layer_idx: int | None, num_layers: int) -> int | None:
    """Index (0-based) of the encoder layer whose output is wanted; None means the final output.

    ComfyUI's rule (`SDClipModel.set_clip_options`): a layer index whose magnitude exceeds the
    depth selects the final output; negative indices count from the end (-1 = last layer).
    """
    if layer_idx is None:
        return None
    if abs(layer_idx) > num_layers:
        log.warning("clip layer %d is beyond this %d-layer text encoder: using its final output (as ComfyUI does)",
                    layer_idx, num_layers)
        return None
    index = num_layers + layer_idx if layer_idx < 0 else layer_idx
    if index >= num_layers:
        raise TokenizeError(f"clip layer {layer_idx} does not exist in a {num_layers}-layer text encoder")
    return index


def causal_mask(length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive causal mask [1, 1, T, T]: position i attends to positions <= i (GPT-style, as CLIP)."""
    mask = torch.full((length, length), torch.finfo(dtype).min, dtype=dtype, device=device).triu_(1)
    return mask[None, None]


def first_eos_positions(ids: torch.Tensor, eos_id: int = EOS_ID) -> torch.Tensor:
    """[B] index of each row's first EOS; the last position for a row without one (ComfyUI's count)."""
    is_eos = ids == eos_id  # [B, T]
    first = is_eos.int().argmax(dim=-1)
    last = torch.full_like(first, ids.shape[-1] - 1)
    return torch.where(is_eos.any(dim=-1), first, last)


BOS_ID = 49406


class TokenEmbedding(nn.Embedding):
    """The token-embedding table with ComfyUI's calling convention, `embedding(ids, out_dtype)`
    (`comfy.ops` Embedding): packs wrap `transformer.text_model.embeddings.token_embedding` and
    call the wrapped table so (smZNodes' textual-inversion wrapper). Our encoder calls it
    through `transformer.get_input_embeddings()`, so such a wrapper is what runs."""

    def forward(self, input: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:  # noqa: A002
        out = super().forward(input)
        return out if out_dtype is None else out.to(out_dtype)


class ClipTextEncoder(TowerOptions, nn.Module):
    """One text tower. `transformer` is a `ClipTextModelWithProjection` (transformers' and ComfyUI's names).

    It is ComfyUI's one-tower `comfy.sd1_clip.SDClipModel` for packs; built for the bigG slot
    it is an `SDXLClipG`, for the ViT-H slot an `SD2ClipHModel` (both subclasses, as in ComfyUI).
    `options` (the set's `EncoderOptions` for this slot: pad token, layer, final norm) is given
    by the `TextEncoderSet` that holds it; `encode_token_weights` uses them.
    """

    options: Any = None  # comfy_core.text_encoders.encoder_set.EncoderOptions, set by the encoder set

    def __new__(cls, *args: Any, **kwargs: Any) -> "ClipTextEncoder":
        config = args[0] if args else kwargs.get("config")
        if cls is ClipTextEncoder and isinstance(config, ClipTextConfig):
            cls = _SLOT_CLASSES.get(config.slot, ClipTextEncoder)
        return super().__new__(cls)

    def __init__(self, config: ClipTextConfig, transformer: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.transformer = transformer

    # --- ComfyUI's SDClipModel surface ---

    @property
    def special_tokens(self) -> dict[str, int]:
        pad = self.options.pad_token if self.options is not None else EOS_ID
        return {"start": BOS_ID, "end": EOS_ID, "pad": pad}

    @property
    def max_length(self) -> int:
        return min(77, self.config.max_positions)

    @property
    def layer_idx(self) -> int | None:
        return self.options.layer_idx if self.options is not None else None

    @property
    def layer(self) -> str:
        """ComfyUI's name for the output in use: "last", or "hidden" (a chosen layer)."""
        return "last" if self.layer_idx is None else "hidden"


    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """ComfyUI's `SDClipModel.set_clip_options`: `{"layer": n}` selects the hidden state of
        layer n (None, or beyond the depth: the final output), `{"projected_pooled": b}` the
        pooled output's projection. It lasts until `reset_clip_options` (packs that encode
        through the towers themselves set it first, as Easy-Use's advanced encoder does)."""
        if self.options is None:
            raise TokenizeError(f"{self.config.slot}: this text encoder is not part of an encoder set")
        from dataclasses import replace

        changes: dict[str, Any] = {}
        if "layer" in options:
            layer = options["layer"]
            changes["layer_idx"] = None if layer is None or abs(layer) > self.num_layers else int(layer)
        if "projected_pooled" in options:
            changes["projected_pooled"] = bool(options["projected_pooled"])
        self.options = replace(self.options, **changes)

    def forward(self, tokens: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """ComfyUI's `SDClipModel.forward(tokens)`: token rows (a `[B, T]` id tensor, or lists of
        ids and embedding vectors) -> (the selected layer's states `[B, T, width]` float32, the
        pooled output `[B, P]`), with this slot's options (layer, final norm, projection)."""
        if self.options is None:
            raise TokenizeError(f"{self.config.slot}: this text encoder is not part of an encoder set, so its pad "
                                "token and layer are unknown; encode through the CLIP object")
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        ids, overrides = chunks_to_ids(rows, self.width, mismatch_pad=self.options.pad_token)
        out = self.encode_ids(ids, overrides, layer_idx=self.options.layer_idx,
                              layer_norm_hidden=self.options.layer_norm_hidden,
                              projected=self.options.projected_pooled)
        return out.hidden, out.pooled

    def encode(self, tokens: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """ComfyUI's `SDClipModel.encode`: `forward`."""
        return self(tokens)

    def encode_token_weights(self, token_weight_pairs: Sequence[Sequence[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """ComfyUI's `SDClipModel.encode_token_weights`: (token, weight) chunks of this tower ->
        (cond [1, T, width], pooled [1, P]), with this slot's default layer and padding."""
        if self.options is None:
            raise TokenizeError(f"{self.config.slot}: this text encoder is not part of an encoder set, so its pad "
                                "token and layer are unknown; encode through the CLIP object")
        with torch.no_grad():
            return encode_weighted_chunks(self, token_weight_pairs, self.options)

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        """Copy `sd` (our parameter names, relative to this tower) into the weights, non-strict."""
        return self.load_state_dict(sd, strict=False)

    @property
    def num_layers(self) -> int:
        return len(self.transformer.text_model.encoder.layers)

    @property
    def width(self) -> int:
        return self.config.width

    def token_embedding(self) -> nn.Module:
        """The input-embedding module in use: ComfyUI's `transformer.get_input_embeddings()`,
        which a pack may have replaced by a wrapper (textual inversion)."""
        return self.transformer.get_input_embeddings()

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = None, layer_norm_hidden: bool = True,
                   projected: bool = True, eos_id: int = EOS_ID) -> EncoderOutput:
        """Encode id chunks `ids` [B, T] (T <= max positions, normally 77).

        `layer_idx`: None for the final layer-normed output, else the hidden state of that layer
        (`resolve_layer`), passed through the final layer norm when `layer_norm_hidden`.
        `overrides`: per-position input embeddings (textual inversion); their ids should be a
        placeholder (0), since the pooled output is taken at the first EOS id.
        `projected`: pooled through `text_projection` (ComfyUI's default) or not.
        """
        text_model = self.transformer.text_model
        weight = self.token_embedding().weight
        if ids.dim() != 2:
            raise TokenizeError(f"{self.config.slot}: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        if ids.shape[1] > self.config.max_positions:
            raise TokenizeError(f"{self.config.slot}: {ids.shape[1]} tokens exceed the encoder's "
                                f"{self.config.max_positions} positions")
        ids = ids.to(device=weight.device, dtype=torch.long)
        # float32 activations throughout, whatever the weights' dtype (see compute_in_float32).
        embeds = self.token_embedding()(ids, out_dtype=torch.float32)  # [B, T, W]
        if overrides:
            embeds = self._apply_overrides(embeds, overrides)
        x = compute_in_float32(text_model.embeddings, inputs_embeds=embeds)  # + position embeddings
        mask = causal_mask(ids.shape[1], x.dtype, x.device)
        target = resolve_layer(layer_idx, self.num_layers)
        hidden = None
        for index, layer in enumerate(text_model.encoder.layers):
            x = compute_in_float32(layer, x, mask)
            if index == target:
                hidden = x
        final = compute_in_float32(text_model.final_layer_norm, x)  # [B, T, W]
        if hidden is None:
            hidden = final
        elif layer_norm_hidden:
            hidden = compute_in_float32(text_model.final_layer_norm, hidden)
        rows = torch.arange(ids.shape[0], device=final.device)
        pooled = final[rows, first_eos_positions(ids, eos_id).to(final.device)]  # [B, W]
        if projected:
            pooled = compute_in_float32(self.transformer.text_projection, pooled)  # [B, P]
        return EncoderOutput(hidden=hidden.float(), pooled=pooled.float())

    def _apply_overrides(self, embeds: torch.Tensor, overrides: Sequence[EmbeddingOverride]) -> torch.Tensor:
        embeds = embeds.clone()
        batch, length, width = embeds.shape
        for override in overrides:
            vectors = override.vectors
            if vectors.dim() == 1:
                vectors = vectors[None]
            if vectors.dim() != 2 or vectors.shape[-1] != width:
                raise TokenizeError(f"{self.config.slot}: embedding vectors must be [k, width {width}], "
                                    f"got shape {tuple(override.vectors.shape)}")
            end = override.position + vectors.shape[0]
            if not (0 <= override.row < batch) or override.position < 0 or end > length:
                raise TokenizeError(f"{self.config.slot}: embedding override row {override.row} positions "
                                    f"{override.position}..{end - 1} outside the [{batch}, {length}] token batch")
            embeds[override.row, override.position:end] = vectors.to(device=embeds.device, dtype=embeds.dtype)
        return embeds


class SDXLClipG(ClipTextEncoder):
    """The OpenCLIP bigG tower (ComfyUI's `comfy.sdxl_clip.SDXLClipG`)."""


class SD2ClipHModel(ClipTextEncoder):
    """The OpenCLIP ViT-H tower (ComfyUI's `comfy.sd2_clip.SD2ClipHModel`)."""


_SLOT_CLASSES: dict[str, type[ClipTextEncoder]] = {"clip_g": SDXLClipG, "clip_h": SD2ClipHModel}


def build_encoder(config: ClipTextConfig, state_dict: Mapping[str, torch.Tensor],
                  dtype: torch.dtype = torch.float32) -> ClipTextEncoder:
    """Build on the meta device (no weight initialisation), then load the converted weights with
    `assign=True`: tensors already in `dtype` are used as they are (no copy; mmap views stay views).

    A tower without a text projection (OpenAI CLIP-L in SD checkpoints) gets an identity one, so
    its pooled output is the unprojected EOS state, as in ComfyUI and diffusers.
    """
    with meta_build():
        transformer = ClipTextModelWithProjection(config.to_model_config())
    # ComfyUI's embedding calling convention (no new state: the class alone changes).
    transformer.text_model.embeddings.token_embedding.__class__ = TokenEmbedding
    converted = convert_state_dict(config, state_dict)
    expected = {k: v for k, v in transformer.state_dict().items()}
    if not config.has_projection:
        converted["text_projection.weight"] = (torch.eye(config.projection_dim, config.width), "<identity>")
    missing = sorted(set(expected) - set(converted))
    if missing:
        raise TextEncoderKeyError(f"text encoder {config.slot} (prefix {config.prefix!r}) is missing keys: "
                                  f"{[config.prefix + m for m in missing[:5]]}{' ...' if len(missing) > 5 else ''}")
    loaded: dict[str, torch.Tensor] = {}
    for name, (tensor, source) in converted.items():
        if name not in expected:
            raise TextEncoderKeyError(f"text encoder key {source!r} maps to {name!r}, which the model does not have")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise TextEncoderKeyError(f"text encoder key {source!r}: expected shape {tuple(expected[name].shape)}, "
                                      f"got {tuple(tensor.shape)}")
        loaded[name] = tensor if tensor.dtype == dtype else tensor.to(dtype)
    transformer.load_state_dict(loaded, strict=True, assign=True)
    # Non-persistent buffer: not in any state dict, still on meta after the assign-load.
    embeddings = transformer.text_model.embeddings
    embeddings.position_ids = torch.arange(config.max_positions).expand((1, -1))
    transformer.eval()
    transformer.requires_grad_(False)
    return ClipTextEncoder(config, transformer)
