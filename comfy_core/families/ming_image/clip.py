"""Ming-Image's text encoder behind ComfyUI's CLIP object (behaviour of ComfyUI's
`comfy/text_encoders/ming_image.py`: `MingImageTokenizer` over `MingTokenizer`, `MingImageTEModel`
over `MingImageClipModel`; `comfy/sd.py` builds it for any CLIPLoader type from a file holding
`thinker.layers.1.mlp.image_gate.proj.weight`, e.g. the template's type "qwen_image"). The network
is `encoder.py`'s.

- Tokenizing: the prompt in Ling's chat (`TEMPLATE`: the default system turn, the prompt as the
  human turn, the assistant turn opened with one `<image><imagePatch></image>` block); with input
  images, one such block per image leads the human turn, blocks separated by blank lines and
  followed by a newline before the prompt. The text is encoded whole by the file's own tokenizer
  (`tokenizer_json`), no special tokens added, prompt weights not parsed; every `<imagePatch>`
  (id 157157) becomes the next image's entry, the last (no image left) the learned query tokens.
- Encoding: the embeddings with each image's tokens (the vision tower's) and the query tokens
  spliced in at their placeholders; the thinker over them (its attention mask ends at the first
  pad token 156892, as ComfyUI's); the output is `cap_feats` [1, 256, 2560] as the conditioning,
  no pooled output, and `direct_context` [1, n, 3840] beside it (the DiT appends it to the caption).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.file_tokenizer import load_tokenizer_json, tokenizer_json_bytes
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

SLOT = "ming_image"
TOKENIZER_KEY = "tokenizer_json"
MARKER = "thinker.layers.1.mlp.image_gate.proj.weight"  # ComfyUI's detect_te_model test
IMAGE_PATCH_TOKEN = 157157
PAD_TOKEN = 156892
IMAGE_BLOCK = "<image><imagePatch></image>"
TEMPLATE = ("<role>SYSTEM</role>你是一个友好的AI助手。\n\ndetailed thinking off<|role_end|><role>HUMAN</role>{}"
            "<|role_end|><role>ASSISTANT</role>" + IMAGE_BLOCK)
CAP_WIDTH = 2560
DIRECT_WIDTH = 3840


class MingTokenizerError(TextEncoderError):
    """A Ming-Image text-encoder file without (or with an unreadable) tokenizer."""


def render_prompt(text: str, image_count: int = 0, template: str | None = None) -> str:
    """The prompt in Ling's chat (see the module docstring); `template`: a caller's own, as
    ComfyUI's `llama_template` (then no image blocks are added)."""
    if template is None:
        template = TEMPLATE
        if image_count:
            template = template.replace("{}", "\n\n".join([IMAGE_BLOCK] * image_count) + "\n{}", 1)
    return template.format(text)


class MingImageTokenizer(FamilyTokenizer):
    """ComfyUI's `MingImageTokenizer` (see the module docstring); tokens under "ming_image"."""

    def __init__(self, tokenizer_json: Any) -> None:
        if tokenizer_json is None:
            raise MingTokenizerError("the Ming-Image text encoder file lacks its tokenizer_json tensor")
        self.slots = (SLOT,)
        self.tokenizer_json = tokenizer_json_bytes(tokenizer_json)
        self.tokenizer = load_tokenizer_json(self.tokenizer_json, MingTokenizerError, "the Ming-Image tokenizer_json")

    def with_embedding_lookup(self, lookup: Any) -> "MingImageTokenizer":
        return self  # ComfyUI's MingTokenizer disables weights; embeddings are not looked up

    def by_slot(self) -> dict[str, Any]:
        return {}

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              images: Sequence[Any] | None = (), **kwargs: Any) -> dict[str, list]:
        images = list(images or ())
        prompt = render_prompt(text, len(images), llama_template)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids or [PAD_TOKEN]  # min_length 1
        remaining = iter(images)
        row: list[tuple] = []
        for index, token in enumerate(ids):
            entry: Any = int(token)
            if token == IMAGE_PATCH_TOKEN:
                image = next(remaining, None)
                entry = {"type": "query"} if image is None else {"type": "image", "data": image}
            row.append((entry, 1.0, 0) if return_word_ids else (entry, 1.0))
        return {SLOT: [row]}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {TOKENIZER_KEY: torch.frombuffer(bytearray(self.tokenizer_json), dtype=torch.uint8)}

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)


class MingImageTEModel(TextEncoderSet):
    """ComfyUI's `MingImageTEModel` (see the module docstring)."""

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """Nothing to set: the outputs are fixed (query tokens through the connector, the tapped
        states), so layer choices have nothing to act on."""

    def reset_clip_options(self) -> None:
        """Nothing to reset (see `set_clip_options`)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        if SLOT not in tokens:
            raise TokenizeError(f"Ming-Image text encoder: the tokens lack key {SLOT!r}; got keys {sorted(tokens)}")
        encoder = self.encoder(SLOT)
        caps, directs = [], []
        with torch.no_grad():
            for row in tokens[SLOT]:
                embeds, mask, blocks = splice_row(encoder, row)
                cap, direct = encoder.encode_embeddings(embeds, mask, blocks)
                caps.append(cap)
                directs.append(direct)
        return torch.cat(caps), None, {"direct_context": torch.cat(directs)}


def splice_row(encoder: Any, row: Sequence[tuple]) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, int]]]:
    """One token row -> (embeddings [1, T, W] float32 with the images' and query tokens spliced in,
    attention mask [1, T], blocks (start, rows, columns)): ComfyUI's `process_tokens` for this
    encoder (ids embedded, the mask 0 from the first pad token on, each embedding entry replaced by
    its tokens; an image's block is its merged patch grid, the query block one row)."""
    table = encoder.get_input_embeddings()
    device = table.weight.device
    pieces: list[torch.Tensor] = []
    mask: list[int] = []
    blocks: list[tuple[int, int, int]] = []
    ended = False
    pending: list[int] = []
    vocab = table.weight.shape[0]

    def flush() -> None:
        if pending:
            ids = torch.tensor(pending, dtype=torch.long, device=device)
            if int(ids.max()) >= vocab:
                raise TokenizeError(f"Ming-Image: token id {int(ids.max())} is outside this encoder's {vocab}-token table")
            pieces.append(table(ids).float())
            pending.clear()

    for pair in row:
        entry = pair[0]
        if isinstance(entry, dict):
            flush()
            start = len(mask)
            if entry.get("type") == "query":
                vectors = encoder.query_tokens.float()
                blocks.append((start, 1, vectors.shape[0]))
            elif entry.get("type") == "image":
                vectors, grid = encoder.image_embedding(entry["data"])
                merge = encoder.config.vision.spatial_merge_size
                blocks.append((start, int(grid[0][1]) // merge, int(grid[0][2]) // merge))
            else:
                raise TokenizeError(f"Ming-Image: an embedding entry of type {entry.get('type')!r} (query or image "
                                    "expected)")
            pieces.append(vectors.to(device=device, dtype=torch.float32))
            mask.extend([1] * vectors.shape[0])
            continue
        token = int(entry)
        if not ended and token == PAD_TOKEN:
            ended = True
        mask.append(0 if ended else 1)
        pending.append(token)
    flush()
    embeds = torch.cat(pieces)[None]
    return embeds, torch.tensor([mask], dtype=torch.long, device=device), blocks


MING_TEXT_ENCODERS = EncoderSetSpec(
    "ming_image", (EncoderOptions(SLOT, SLOT, PAD_TOKEN, None, False, projected_pooled=False, kind="ming_image",
                                  nominal_width=CAP_WIDTH, min_length=1),),
    SLOT, set_class=MingImageTEModel, tokenizer_class=MingImageTokenizer, clip_types=())


def holds_ming_encoder(tensors: Any) -> bool:
    """Whether a file is Ming-Image's text encoder (names only: ComfyUI's `detect_te_model` key)."""
    return MARKER in tensors


def clip_from_state(state: Mapping[str, torch.Tensor], tokenizer_json: Any, load_device: Any = None,
                    offload_device: Any = "cpu") -> Any:
    """The CLIP object of the encoder's tensors (ComfyUI's names) and its tokenizer bytes."""
    from comfy_core.families.ming_image.encoder import build_encoder
    from comfy_core.text_encoders.clip import CLIP

    tokenizer = MingImageTokenizer(tokenizer_json)
    module = MingImageTEModel(MING_TEXT_ENCODERS, {SLOT: build_encoder(state)})
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)


def dequantize_bank(path: Any, layer: Any, read: Any) -> torch.Tensor:
    """An int8 expert bank [E, out, in] (ComfyUI's `MoEExperts` quantised per expert row, optionally
    ConvRot-rotated) as float32."""
    from comfy_core.weights.quant_int8 import dequantize_int8
    from comfy_core.weights.quant_registry import int8_group

    if layer.format.name != "int8_tensorwise":
        raise TextEncoderError(f"{path}: expert bank {layer.name!r} is quantised as {layer.format.name}; only int8 "
                               "expert banks are read")
    q, scale = read(layer.name + ".weight"), read(layer.name + ".weight_scale")
    group = int8_group(layer.conf)
    experts, rows = q.shape[0], q.shape[1]
    scale = scale.reshape(experts, -1) if scale.numel() != 1 else scale.reshape(1, 1).expand(experts, 1)
    if scale.shape[1] not in (1, rows):
        raise TextEncoderError(f"{path}: expert bank {layer.name!r} has scales {list(scale.shape)} for "
                               f"{experts} x {rows} rows")
    return torch.stack([dequantize_int8(q[e], scale[e].reshape(-1, 1) if scale.shape[1] == rows else scale[e, 0],
                                        group) for e in range(experts)])


def load_ming_text_encoder(path: str | Path, dtype: torch.dtype | None = None, load_device: Any = None,
                           offload_device: Any = "cpu") -> Any:
    """`ming_image_*ling_mini*.safetensors` -> CLIP. Quantised layers (ComfyUI's int8 ConvRot
    release) are dequantised as read; weights are kept in the file's dtype (ComfyUI's
    `dtype_llama`: `thinker.norm.weight`'s) unless `dtype` is float32; `expert_bias` stays float32. The
    int8 expert banks [E, out, in] are dequantised expert by expert (`dequantize_bank`)."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    with CheckpointFile(path) as stored:
        try:
            layers = quantized_layers(stored.tensors, getattr(stored, "metadata", None) or {}, stored.read)
        except QuantFormatError as exc:
            raise TextEncoderError(f"{path}: {exc}") from None
        # the expert banks [E, out, in]: dequantised here, expert by expert (the generic view reads 2-D layers)
        banks = {name: layers.pop(name) for name in list(layers) if len(stored.tensors[name + ".weight"].shape) == 3}
        view = QuantizedHeader.for_detection(stored, layers) if layers else stored
        if not holds_ming_encoder(view.tensors):
            raise TextEncoderError(f"{path}: not a Ming-Image text encoder (no {MARKER})")
        if TOKENIZER_KEY not in view.tensors:
            raise MingTokenizerError(f"{path}: the Ming-Image text encoder file lacks its {TOKENIZER_KEY} tensor")
        tokenizer_json = view.read(TOKENIZER_KEY, None)
        norm_dtype = view.read("thinker.norm.weight", None).dtype
        storage = torch.float32 if dtype == torch.float32 else norm_dtype
        state = {}
        bank_tensors = {n for layer in banks.values() for n in layer.tensor_names(stored.tensors)}
        for name in view.tensors:
            if name == TOKENIZER_KEY or name.endswith("lm_head.weight") or name in bank_tensors:
                continue
            state[name] = view.read(name, torch.float32 if name.endswith("expert_bias") else storage)
        for name, layer in banks.items():
            state[name + ".weight"] = dequantize_bank(path, layer, stored.read_stored).to(storage)
    clip = clip_from_state(state, tokenizer_json, load_device, offload_device)
    config = clip.cond_stage_model.ming_image.config
    log.info("Ming-Image text encoder: %s (%d blocks, width %d, %d experts%s%s)", Path(path).name, config.num_layers,
             config.hidden_size, config.num_experts, ", vision tower" if config.vision is not None else "",
             ", quantised layers dequantised" if layers else "")
    return clip


__all__ = ["IMAGE_BLOCK", "IMAGE_PATCH_TOKEN", "MING_TEXT_ENCODERS", "MingImageTEModel", "MingImageTokenizer",
           "MingTokenizerError", "PAD_TOKEN", "SLOT", "TEMPLATE", "clip_from_state", "dequantize_bank", "holds_ming_encoder",
           "load_ming_text_encoder", "render_prompt", "splice_row"]
