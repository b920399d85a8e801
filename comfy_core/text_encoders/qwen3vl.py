"""The Qwen3-VL text tower (Qwen Team 2025, "Qwen3-VL Technical Report"): Qwen-Image 2.1's
Qwen3-VL-8B and Flux 3's Qwen3-VL-4B encoders, as ComfyUI's `comfy/text_encoders/qwen3vl.py`
(`Qwen3VL`, `Qwen3VLClipModel`) and `llama.py` (`Qwen3VL_8BConfig` / `Qwen3VL_4BConfig`, `Llama2_`)
run them; transformers' `Qwen3VLModel` is the numerics reference.

Files: ComfyUI's `qwen3vl_{4b,8b}*.safetensors` hold transformers' layout, the language model under
`model.language_model.`, the vision tower under `model.visual.`, the LM head as `lm_head.weight`
(ComfyUI renames them `model.`, `visual.`, `model.lm_head.` when it loads them, and so does
`Qwen3VLNames` here; a state dict already in those names is read as it is). A file is Qwen3-VL when it
holds `model.visual.deepstack_merger_list.0.norm.weight` (ComfyUI's rule: DeepStack is Qwen3-VL's
alone); it is the 4B when the vision merger projects to 2560, else the 8B (slots `qwen3vl_4b`,
`qwen3vl_8b`). Weights as stored: float, per-layer float8 (`comfy_quant` + `weight_scale`, kept fp8
and computed with the scale) or int8 with or without ConvRot (`int8_tensorwise`, ComfyUI's
`*_int8_convrot` releases: kept int8, `comfy_core/models/quant_linear.py`) or NVFP4 with or without
ModelOpt's AWQ `pre_quant_scale` (MiniMax H3's `*_nvfp4_awq`: kept packed, the input scaled first), in the language model and
the vision tower alike; the LM head (`lm_head.weight`, float or scaled float8) is kept for
TextGenerate only (the 4B ties it to the token table): text prompts generate through Qwen3's
key/value-cache path (for text Qwen3-VL's positions are plain RoPE); prompts with images prefill at
their M-RoPE positions with DeepStack, the new tokens continuing from the largest position plus one
(`prompt_inputs`, `decode_step`). Every layer computes in float32.

The language model is Qwen3's (`qwen3.py`: pre-norm blocks with per-head q/k RMSNorm, grouped-query
attention, SwiGLU; heads of 128) with rope theta 5e6 and interleaved multimodal RoPE: each head's 64
frequency pairs take the temporal position, except pairs 1, 4, 7, ... (the first 20 such) which take
the row and 2, 5, 8, ... (20) which take the column (`interleaved_mrope_tables`, sections 24 / 20 /
20). For text the three positions are equal, which is plain RoPE, so a text prompt runs Qwen3's
path. Image entries in a token row (`{"type": "image", "data": IMAGE}` where `<|image_pad|>` was)
become the vision tower's tokens (`qwen3vl_vision.py`) spliced in at that place
(`qwen25vl.splice_images`), their positions Qwen2-VL's rule (`qwen25vl.image_position_ids`:
an image's tokens share the temporal position of its start and count rows / columns from it; the
text after it continues from the start plus the image's longer merged side), and DeepStack adds the
vision tower's tapped features to the hidden states at the image positions after each of the first
blocks (one block per tapped feature), as ComfyUI's `Llama2_` does before it records a layer's output.

`Qwen3VLTextEncoder` is ComfyUI's `Qwen3VLClipModel` (an `SDClipModel`): layer "hidden", index -1
(the last block's output, without the final norm), special tokens `{"pad": 151643}`, attention
masks used and returned (the token mask is ComfyUI's, `qwen3.token_mask`); no pooled output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import (FLOAT8_FORMATS, QUANT_CONF_SUFFIX, attention_bias, build_on_meta,
                                                  embed_tokens, load_strict, rotary_tables, scale_linears)
from comfy_core.text_encoders.encoder import resolve_layer
from comfy_core.text_encoders.errors import TextEncoderKeyError
from comfy_core.text_encoders.qwen25vl import image_position_ids, splice_images
from comfy_core.text_encoders.qwen25vl_vision import resized_size
from comfy_core.text_encoders.qwen3 import Qwen3Config, Qwen3Options, Qwen3TextEncoder, Qwen3Transformer
from comfy_core.text_encoders.qwen3vl_vision import (Qwen3VLDetectionError, Qwen3VLInputError, Qwen3VLVisionConfig,
                                                     encode_image)
from comfy_core.text_encoders.token_chunks import EmbeddingOverride

MARKER = "model.visual.deepstack_merger_list.0.norm.weight"  # ComfyUI's detect_te_model
RENAMED_MARKER = "visual.deepstack_merger_list.0.norm.weight"  # the same tower in ComfyUI's loaded names
QK_NORM = "model.layers.0.self_attn.q_norm.weight"
QWEN3VL_4B_SLOT, QWEN3VL_8B_SLOT = "qwen3vl_4b", "qwen3vl_8b"
QWEN3VL_4B_WIDTH, QWEN3VL_8B_WIDTH = 2560, 4096
ROPE_THETA = 5_000_000.0
MROPE_SECTION = (24, 20, 20)  # temporal / height / width frequency pairs (interleaved)
# The file's names -> ComfyUI's (its `state_dict_prefix_replace` when it loads a Qwen3-VL file).
RENAMES = (("model.language_model.", "model."), ("model.visual.", "visual."))
_IGNORED = ("logit_scale",)


class Qwen3VLKeyError(TextEncoderKeyError, ValueError):
    """A Qwen3-VL state-dict key is missing, unknown, unsupported or of the wrong shape."""


class Qwen3VLNames(Mapping[str, Any]):
    """A file's tensors (or header entries) under `prefix` served under ComfyUI's names (see the
    module doc): `model.*` the language model, `visual.*` the vision tower, `lm_head.*`."""

    def __init__(self, tensors: Mapping[str, Any], prefix: str = "") -> None:
        self._tensors = tensors
        self._names: dict[str, str] = {}
        for name in tensors.keys():
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            for old, new in RENAMES:
                if rest.startswith(old):
                    rest = new + rest[len(old):]
                    break
            self._names[rest] = name

    def __getitem__(self, name: str) -> Any:
        return self._tensors[self._names[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def file_name(self, name: str) -> str:
        """The file's own name of `name`."""
        return self._names[name]


def is_qwen3vl(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether `prefix` holds a Qwen3-VL tower (the file's layout or ComfyUI's loaded names)."""
    return prefix + MARKER in tensors or (prefix + RENAMED_MARKER in tensors and prefix + QK_NORM in tensors)


@dataclass(frozen=True)
class Qwen3VLConfig(Qwen3Config):
    """A Qwen3-VL language model with its vision tower (see the module doc). `prefix`: where the
    file's names start; the shapes are read under ComfyUI's names (`Qwen3VLNames`)."""

    rope_theta: float = ROPE_THETA
    slot: str = QWEN3VL_8B_SLOT
    mrope_section: tuple[int, int, int] = MROPE_SECTION
    vision: Qwen3VLVisionConfig | None = None

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Qwen3VLConfig | None":
        """The Qwen3-VL tower under `prefix`, or None when there is none. `tensors`: name -> object
        with `.shape` (and `.dtype`), never tensor data. `Qwen3VLDetectionError` for incomplete or
        inconsistent towers."""
        if not is_qwen3vl(tensors, prefix):
            return None
        names = Qwen3VLNames(tensors, prefix)
        try:
            text = Qwen3Config.detect_from_weights(names, "")
        except TextEncoderKeyError as exc:
            raise Qwen3VLDetectionError(f"Qwen3-VL language model: {exc}") from None
        except ValueError as exc:
            raise Qwen3VLDetectionError(f"Qwen3-VL language model under {prefix!r}: {exc}") from None
        if text is None:
            raise Qwen3VLDetectionError(f"Qwen3-VL under {prefix!r}: the language model's {QK_NORM!r} (Qwen3's "
                                        "q/k norm) is missing")
        if 2 * sum(MROPE_SECTION) != text.head_dim:
            raise Qwen3VLDetectionError(f"Qwen3-VL under {prefix!r}: heads of {text.head_dim} channels; Qwen3-VL's "
                                        f"interleaved M-RoPE sections {MROPE_SECTION} cover heads of "
                                        f"{2 * sum(MROPE_SECTION)}")
        vision = Qwen3VLVisionConfig.detect_from_weights(names, text.hidden_size)
        fields = {name: getattr(text, name) for name in text.__dataclass_fields__}
        fields.update(prefix=prefix, rope_theta=ROPE_THETA, vision=vision,
                      slot=QWEN3VL_4B_SLOT if vision.out_hidden_size == QWEN3VL_4B_WIDTH else QWEN3VL_8B_SLOT)
        return cls(**fields)


def interleaved_mrope_tables(position_ids: torch.Tensor, head_dim: int, theta: float, sections: Sequence[int],
                             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, head_dim] float32 of Qwen3-VL's interleaved M-RoPE for positions [3, T]
    (temporal, height, width): frequency pair j turns with the temporal position, except pairs
    1, 4, 7, ... below 3 * sections[1] (height) and 2, 5, 8, ... below 3 * sections[2] (width);
    rotate-half layout (the pairs' angles twice). Equal rows give `rotary_tables`' result."""
    if position_ids.dim() != 2 or position_ids.shape[0] != 3:
        raise Qwen3VLInputError(f"qwen3-vl: position ids must be [3, tokens], got {tuple(position_ids.shape)}")
    if 2 * sum(sections) != head_dim:
        raise Qwen3VLInputError(f"qwen3-vl: M-RoPE sections {tuple(sections)} do not cover a {head_dim}-channel head")
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = position_ids.to(device=device, dtype=torch.float32)[:, :, None] * inv_freq  # [3, T, d/2]
    chosen = freqs[0].clone()
    for axis, offset in ((1, 1), (2, 2)):
        pairs = slice(offset, 3 * sections[axis], 3)
        chosen[:, pairs] = freqs[axis][:, pairs]
    angles = torch.cat((chosen, chosen), dim=-1)  # [T, d]
    return angles.cos(), angles.sin()


@dataclass(frozen=True)
class ImagePrompt:
    """What a TextGenerate prompt with images needs besides its embeddings: its M-RoPE positions
    [3, T], the DeepStack features per tapped block [V, W] and the image positions [1, T]."""

    positions: torch.Tensor
    deepstack: Sequence[torch.Tensor]
    visual: torch.Tensor


class Qwen3VLTransformer(Qwen3Transformer):
    """ComfyUI's `Qwen3VL` (`qwen3vl.py`): the language model as `model`, the vision tower as
    `visual`, `get_input_embeddings()`."""

    def __init__(self, model: nn.Module, visual: nn.Module) -> None:
        super().__init__(model)
        self.visual = visual


class Qwen3VLTextEncoder(Qwen3TextEncoder):
    """One Qwen3-VL tower, ComfyUI's `Qwen3VLClipModel` surface (an `SDClipModel`) for our
    `TextEncoderSet` (see the module doc). The token-level surface is the Qwen3 tower's; rows
    holding image entries run through the vision tower and Qwen3-VL's positions and DeepStack."""

    can_generate = True  # text prompts, and prompts with images (module doc)
    generation_media = ("image",)  # what TextGenerate may give this tower besides text

    def __init__(self, config: Qwen3VLConfig, transformer: Qwen3VLTransformer) -> None:
        super().__init__(config, transformer)
        self.options = self.default_options = Qwen3Options(slot=config.slot, token_key=config.slot, layer_idx=-1)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> input embeddings [B, T, W] float32."""
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "qwen3-vl", skip_empty=False)

    def forward(self, tokens: Any) -> tuple:
        """ComfyUI's `SDClipModel.forward(tokens)`: token rows -> (states [B, T, W] float32, None,
        {"attention_mask": [B, T]}); a row with image entries is encoded on its own, its images
        expanded into their vision tokens (see the module doc)."""
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else [list(row) for row in tokens]
        if not any(isinstance(token, dict) for row in rows for token in row):
            return super().forward(tokens)
        if len(rows) != 1:
            raise Qwen3VLInputError(f"qwen3-vl: prompts with images are encoded one row at a time, got {len(rows)}")
        features: list[list[torch.Tensor]] = []
        x, mask, images = splice_images(self, rows[0], "qwen3-vl", features)
        visual = torch.zeros(mask.shape, dtype=torch.bool)  # [1, T]: the image positions
        for start, count, _grid in images:
            visual[:, start:start + count] = True
        deepstack = [torch.cat([per_image[layer] for per_image in features]) for layer in range(len(features[0]))]
        attention = mask if self.enable_attention_masks else None
        positions = image_position_ids(images, x.shape[1], None, x.device)
        hidden = self.encode_embeds(x, self.options.layer_idx, self.options.layer_norm_hidden, attention, positions,
                                    deepstack, visual)
        if self.zero_out_masked:
            hidden = hidden * mask.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(-1)
        if self.return_attention_masks:
            return hidden, None, {"attention_mask": mask.to(hidden.device)}
        return hidden, None

    def prompt_inputs(self, row: Sequence[Any]) -> tuple[torch.Tensor, "ImagePrompt | None"]:
        """One prompt row for TextGenerate -> (input embeddings [1, T, W] float32, None for text, else
        the prompt's `ImagePrompt`: M-RoPE positions [3, T] and the DeepStack features the prefill adds
        at the image positions), as ComfyUI's `Qwen3VLClipModel.generate` builds them."""
        if not any(isinstance(token, dict) for token in row):
            return self.prompt_embeds(row), None
        features: list[list[torch.Tensor]] = []
        x, _mask, images = splice_images(self, list(row), "qwen3-vl", features)
        visual = torch.zeros(1, x.shape[1], dtype=torch.bool)
        for start, count, _grid in images:
            visual[:, start:start + count] = True
        deepstack = ([torch.cat([per_image[layer] for per_image in features]) for layer in range(len(features[0]))]
                     if features else [])
        positions = image_position_ids(images, x.shape[1], None, x.device)
        return x, ImagePrompt(positions, deepstack, visual)

    def decode_step(self, embeds: torch.Tensor, cache: Any, positions: "ImagePrompt | None" = None) -> torch.Tensor:
        """Qwen3's step for text; a prompt with images (`positions`, from `prompt_inputs`) runs at its
        M-RoPE positions with DeepStack after the first blocks, and the tokens after it continue from
        its largest position plus one on all three axes (ComfyUI's generation after images)."""
        base = getattr(cache, "mrope_next", None)
        if positions is None and base is None:
            return super().decode_step(embeds, cache)
        start, length = cache.length, embeds.shape[1]
        deepstack: Sequence[torch.Tensor] = ()
        visual = None
        if positions is None:
            ids = torch.arange(base, base + length, device=embeds.device).expand(3, -1)
            cache.mrope_next = base + length
        else:
            ids, deepstack, visual = positions.positions, positions.deepstack, positions.visual
            if ids.shape != (3, length):
                raise Qwen3VLInputError(f"qwen3-vl: positions {tuple(ids.shape)} for {length} tokens")
            cache.mrope_next = int(ids[:, -1].max()) + 1
        config = self.config
        cos, sin = interleaved_mrope_tables(ids, config.head_dim, config.rope_theta, config.mrope_section,
                                            embeds.device)
        total = start + length
        low = torch.finfo(torch.float32).min / 4
        bias = torch.full((length, total), low, dtype=torch.float32, device=embeds.device).triu_(start + 1)[None, None]
        x = embeds.float()
        for index, block in enumerate(self.transformer.model.layers):
            x = self._block(block, x, cos, sin, bias, cache, index)
            if index < len(deepstack):
                x = x.clone()
                x[visual.to(x.device)] += deepstack[index].to(device=x.device, dtype=x.dtype)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def encode_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """IMAGE [B, H, W, C] -> (its language-model tokens [N, W] float32, grid [1, 3], DeepStack
        features [N, W] per tapped block) through the vision tower (`qwen3vl_vision`)."""
        visual = getattr(self.transformer, "visual", None)
        if visual is None or self.config.vision is None:
            raise Qwen3VLInputError("qwen3-vl: this text encoder has no vision tower, so it cannot encode images")
        return encode_image(visual, self.config.vision, image)

    def image_token_count(self, image: Any) -> int:
        """How many positions an image entry of `image` (IMAGE [B, H, W, C]) expands to: its merged
        patch grid after ComfyUI's resize (the tower is not run)."""
        vision = self.config.vision
        if vision is None:
            raise Qwen3VLInputError("qwen3-vl: this text encoder has no vision tower, so it cannot encode images")
        if not isinstance(image, torch.Tensor) or image.dim() != 4:
            raise Qwen3VLInputError(f"qwen3-vl: an image must be an IMAGE tensor [batch, height, width, 3+], got "
                                    f"{type(image).__name__}")
        side = vision.patch_size * vision.spatial_merge_size
        height, width = resized_size(int(image.shape[1]), int(image.shape[2]), side)
        return (height // side) * (width // side)

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[EmbeddingOverride] = (),
                   layer_idx: int | None = -1, layer_norm_hidden: bool = False,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> the selected states [B, T, W] float32 (text: Qwen3's path with this
        tower's rope theta; see `Qwen3TextEncoder.encode_ids`)."""
        return super().encode_ids(ids, overrides, layer_idx, layer_norm_hidden, attention_mask)

    def encode_embeds(self, x: torch.Tensor, layer_idx: int | None = -1, layer_norm_hidden: bool = False,
                      attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                      deepstack: Sequence[torch.Tensor] = (), visual: torch.Tensor | None = None) -> torch.Tensor:
        """Input embeddings x [B, T, W] -> the selected states [B, T, W] float32: block `layer_idx`'s
        output (negative from the end; through the final norm when `layer_norm_hidden`), None for
        the final normed output. `position_ids` [3, T] (None: 0..T-1, text); `deepstack[i]`
        [V, W] is added at the `visual` [B, T] positions after block i (before its output is taken)."""
        length = x.shape[1]
        config = self.config
        if position_ids is None:
            cos, sin = rotary_tables(length, config.head_dim, config.rope_theta, x.device)
        else:
            if position_ids.shape[-1] != length:
                raise Qwen3VLInputError(f"qwen3-vl: {position_ids.shape[-1]} positions for {length} tokens")
            cos, sin = interleaved_mrope_tables(position_ids, config.head_dim, config.rope_theta,
                                                config.mrope_section, x.device)
        bias = attention_bias(attention_mask, length, x.device)  # [B or 1, 1, T, T]
        model = self.transformer.model
        target = resolve_layer(layer_idx, self.num_layers)
        if deepstack and visual is None:
            raise Qwen3VLInputError("qwen3-vl: DeepStack features without the image positions they belong to")
        x = x.float()
        for index, block in enumerate(model.layers):
            x = self._block(block, x, cos, sin, bias)
            if index < len(deepstack):
                x = x.clone()
                x[visual.to(x.device)] += deepstack[index].to(device=x.device, dtype=x.dtype)
            if index == target:
                return (compute_in_float32(model.norm, x) if layer_norm_hidden else x).float()
        return compute_in_float32(model.norm, x).float()


# --- loading ---

# Formats kept as stored (`QuantizedLinear`): int8 (ConvRot or not) and NVFP4, with ModelOpt's AWQ
# `pre_quant_scale` where the file has it (MiniMax H3's `*_nvfp4_awq` Qwen3-VL-32B).
STORED_FORMATS = ("int8_tensorwise", "nvfp4")


def _stored_scales(layer: Any) -> tuple[str, ...]:
    if layer.format.name == "int8_tensorwise":
        return ()  # its weight_scale is handled below; its input_scale is not read
    return (*layer.format.scales, *layer.format.optional, "pre_quant_scale")


def _split(names: Qwen3VLNames, config: Qwen3VLConfig) -> tuple[dict, dict, dict, dict]:
    """The file's tensors (ComfyUI's names) -> (plain weights by name, int8 layers {layer: its
    `QuantizedLayer`}, their tensors by name, float8 weight scales {weight name: scale}). Unknown keys
    and quantisation formats other than float8 / int8 are a `Qwen3VLKeyError`, never dropped."""
    from comfy_core.weights.quant_registry import FORMATS, QuantFormatError, QuantizedLayer, parse_conf

    where = lambda name: config.prefix + names.file_name(name)  # noqa: E731  (the file's own name in errors)
    confs: dict[str, dict] = {}
    for name in names:
        if name.endswith(QUANT_CONF_SUFFIX) and not name.startswith("lm_head."):
            try:
                confs[name[:-len(QUANT_CONF_SUFFIX)]] = parse_conf(names[name], where(name))
            except QuantFormatError as exc:
                raise Qwen3VLKeyError(f"Qwen3-VL: {exc}") from None
    plain: dict[str, torch.Tensor] = {}
    int8: dict[str, torch.Tensor] = {}
    scales: dict[str, torch.Tensor] = {}
    layers = {}
    for layer, conf in confs.items():
        if conf["format"] in STORED_FORMATS:
            layers[layer] = QuantizedLayer(layer, FORMATS[conf["format"]], conf)
        elif conf["format"] not in FLOAT8_FORMATS:
            raise Qwen3VLKeyError(f"Qwen3-VL layer {where(layer + QUANT_CONF_SUFFIX)!r}: quantisation format "
                                  f"{conf['format']!r} is not read for text encoders (float8, int8 and nvfp4 only)")
        for suffix in ("weight", "weight_scale"):
            if f"{layer}.{suffix}" not in names:
                raise Qwen3VLKeyError(f"Qwen3-VL layer {config.prefix + layer!r} ({conf['format']}): its {suffix} is "
                                      "missing")
    for name in names:
        layer, _, suffix = name.rpartition(".")
        if name.startswith("lm_head.") or name in _IGNORED or name.endswith(QUANT_CONF_SUFFIX):
            continue
        if layer in layers and suffix in _stored_scales(layers[layer]):
            int8[name] = names[name]  # a scale the stored layer computes with (NVFP4's, AWQ's pre-scale)
            continue
        if layer in confs and suffix in ("weight_scale", "input_scale"):
            if suffix == "weight_scale" and layer in layers:
                int8[name] = names[name]
            elif suffix == "weight_scale":
                scale = names[name]
                if scale.numel() != 1:
                    raise Qwen3VLKeyError(f"Qwen3-VL key {where(name)!r}: one float8 scale per layer expected, got "
                                          f"shape {list(scale.shape)}")
                scales[layer + ".weight"] = scale.detach().to(torch.float32).reshape(())
            continue  # input scales serve fp8 / int8 matrix products, which text encoders do not run
        if layer in layers and suffix == "weight":
            int8[name] = names[name]
        elif name.startswith(("model.", "visual.")) and suffix in ("weight", "bias"):
            plain[name] = names[name]
        else:
            raise Qwen3VLKeyError(f"Qwen3-VL key {where(name)!r} is not a weight of a Qwen3-VL text encoder")
    return plain, layers, int8, scales


def _load_part(module: nn.Module, part: str, config: Qwen3VLConfig, plain: Mapping[str, torch.Tensor],
               layers: Mapping[str, Any], int8: Mapping[str, torch.Tensor], scales: Mapping[str, torch.Tensor],
               dtype: torch.dtype | None) -> None:
    """Load the `part` ("model." or "visual.") tensors into `module` (built on the meta device):
    plain weights strictly, float8 layers kept fp8 with their scale, int8 layers as
    `QuantizedLinear`s holding the stored int8 weight (ComfyUI's `mixed_precision_ops`)."""
    from comfy_core.models.quant_linear import attach_quantized, detach_quantized_weights
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedLayer

    mine = {name[len(part):]: layer for name, layer in layers.items() if name.startswith(part)}
    relative = {name: QuantizedLayer(name, layer.format, layer.conf) for name, layer in mine.items()}
    try:
        detach_quantized_weights(module, relative, "")
    except QuantFormatError as exc:  # a description on what is not a linear layer of this encoder
        raise Qwen3VLKeyError(f"Qwen3-VL ({part}): {exc}") from None
    own_scales = {name[len(part):]: scale for name, scale in scales.items() if name.startswith(part)}
    load_strict(module, {name[len(part):]: t for name, t in plain.items() if name.startswith(part)},
                config.prefix + part, dtype, Qwen3VLKeyError, "Qwen3-VL",
                f"Qwen3-VL encoder (prefix {config.prefix!r})", "this Qwen3-VL encoder", keep=set(own_scales))
    scale_linears(module, own_scales, config.prefix + part, Qwen3VLKeyError, "Qwen3-VL")
    stored = {name[len(part):]: t for name, t in int8.items() if name.startswith(part)}
    try:
        attach_quantized(module, relative, stored.keys(), stored.__getitem__, "", torch.float32)
    except QuantFormatError as exc:
        raise Qwen3VLKeyError(f"Qwen3-VL ({part}): {exc}") from None


def build_qwen3vl_encoder(config: Qwen3VLConfig, state_dict: Mapping[str, torch.Tensor],
                          dtype: torch.dtype | None = None) -> Qwen3VLTextEncoder:
    """Build the language model (transformers' `Qwen3Model`) and the vision tower (its
    `Qwen3VLVisionModel`) on the meta device, then load the file's tensors with `assign=True`.

    `dtype`: the storage dtype of the float weights (computation is float32 anyway); None keeps each
    tensor as the file stores it, as ComfyUI keeps its LLM encoders in the file's dtype. Quantised
    layers are kept as stored whatever `dtype` says."""
    from transformers import Qwen3Model
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    from comfy_core.checkpoint.meta_build import meta_build

    if config.vision is None:
        raise Qwen3VLKeyError("Qwen3-VL: a config without its vision tower (detect it from the file's weights)")
    names = Qwen3VLNames(state_dict, config.prefix)
    plain, layers, int8, scales = _split(names, config)
    model = build_on_meta(Qwen3Model, config.to_transformers())
    _load_part(model, "model.", config, plain, layers, int8, scales, dtype)
    with meta_build():
        visual = Qwen3VLVisionModel(config.vision.to_transformers())
    visual.rotary_pos_emb = None  # computed per call (qwen25vl_vision.rotary_2d)
    _load_part(visual, "visual.", config, plain, layers, int8, scales, dtype)
    stray = sorted(set(layers) - {n for n in layers if n.startswith(("model.", "visual."))})
    if stray:
        raise Qwen3VLKeyError(f"Qwen3-VL: quantised layers {stray} are not layers of this encoder")
    transformer = Qwen3VLTransformer(model, visual)
    head = names["lm_head.weight"] if "lm_head.weight" in names else None
    if head is not None and head.is_floating_point():  # an untied head (the 8B), as stored: generation only
        transformer.register_buffer("lm_head_weight", head, persistent=False)
        if head.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and "lm_head.weight_scale" in names:
            transformer.register_buffer("lm_head_scale", names["lm_head.weight_scale"].float(), persistent=False)
    return Qwen3VLTextEncoder(config, transformer)


__all__ = ["MARKER", "QWEN3VL_4B_SLOT", "QWEN3VL_8B_SLOT", "Qwen3VLConfig", "Qwen3VLDetectionError",
           "Qwen3VLInputError", "Qwen3VLKeyError", "Qwen3VLNames", "Qwen3VLTextEncoder", "Qwen3VLTransformer",
           "build_qwen3vl_encoder", "interleaved_mrope_tables", "is_qwen3vl"]
