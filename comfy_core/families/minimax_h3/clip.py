"""MiniMax H3's text encoder (CLIPLoader type "minimax"): Qwen3-VL-32B truncated to 50 blocks
(`qwen3vl_32b_minimax_h3_*.safetensors`, our Qwen3-VL tower `comfy_core.text_encoders.qwen3vl`),
after ComfyUI's `comfy/text_encoders/minimax.py` (`MiniMaxH3Tokenizer`, `MiniMaxH3TEModel`);
written here.

The presentation is not chat-templated: raw prompt text, no special tokens, prompt weights
disabled, no padding, tokens under "qwen3vl_32b", with vision blocks
(`<|vision_start|>`, the image entry, `<|vision_end|>`) spliced in before the prompt:

- text to video: `<prompt>`;
- first / last frames (`images=`): `"<Picture 1>: " <block> ["<Picture 2>: " <block>] <prompt>`;
- references (`minimax_ref_items=`, MiniMaxH3ReferenceToVideo's list, 1-based ordinals per kind):
  an image gives `"<Picture i>: " <block>`, an audio `"<Audio j>: "` (audio never enters Qwen), a
  video `"<Video k>: "` then per pair of its frames (sampled at 2 fps, the last repeated to an
  even count) `"<T.T seconds>" <block of the two frames>`, T.T their mean timestamp.

The tokenizer knows the FL2VA / Ref2VA tokenizer's extra tokens (`<d>` ... `<|caption_end|>`,
ids 151669..151675). Encoding: the last block's output without the final norm (the file stops at
layer 50, ComfyUI's layer "last"), no attention mask; a two-frame video block fills the vision
tower's temporal patch with its two frames (an image repeats its one frame). With the states
goes `minimax_token_tags` [T] (long): 0 over each vision block including its start / end tokens
(the DiT modulates them as video), 1 elsewhere.

NVFP4-AWQ text-encoder files (`*_nvfp4_awq`) are not read yet: the Qwen3-VL loader takes float,
float8 and int8 layers and names any other format in its error.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen25vl import image_position_ids, splice_images
from comfy_core.text_encoders.qwen25vl_vision import MAX_PIXELS, MIN_PIXELS, resized_size
from comfy_core.text_encoders.qwen3vl import QWEN3VL_8B_SLOT
from comfy_core.text_encoders.qwen3vl_vision import MEAN, STD, encode_image_patches
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID, QwenTokenizer, build_qwen_tokenizer
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

TOKEN_KEY = "qwen3vl_32b"  # ComfyUI's name of the tower and its tokens
QWEN3VL_32B_WIDTH = 5120
VISION_START, VISION_END = 151652, 151653
# The FL2VA / Ref2VA tokenizer's added tokens, ids fixed by the released tokenizer (after Qwen's 26)
EXTRA_TOKENS = {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671, "<|lyrics_start|>": 151672,
                "<|lyrics_end|>": 151673, "<|caption_start|>": 151674, "<|caption_end|>": 151675}
VIDEO_BLOCK = "minimax_video_block"
TOKEN_TAGS = "minimax_token_tags"
TEXT_TAG, VISION_TAG = 1, 0


class MiniMaxH3PromptError(TokenizeError, ValueError):
    """A MiniMax H3 prompt or reference list that cannot be tokenized or encoded."""


@lru_cache(maxsize=1)
def minimax_backend() -> Any:
    """The Qwen tokenizer with MiniMax H3's extra special tokens (one per process)."""
    from tokenizers import AddedToken

    backend = build_qwen_tokenizer()
    for content, expected in EXTRA_TOKENS.items():
        backend.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        got = backend.token_to_id(content)
        if got != expected:
            raise MiniMaxH3PromptError(f"MiniMax H3 tokenizer: {content!r} got id {got}, the release has {expected}")
    return backend


def _is_image(token: Any) -> bool:
    return isinstance(token, Mapping) and token.get("type") == "image"


class MiniMaxH3Tokenizer(FamilyTokenizer):
    """ComfyUI's `MiniMaxH3Tokenizer` (see the module doc); `qwen3vl_32b` is its one tokenizer."""

    def __init__(self, tokenizers: dict[str, Any]) -> None:
        own = {}
        for slot, tokenizer in tokenizers.items():
            if isinstance(tokenizer, QwenTokenizer) and tokenizer.backend is not minimax_backend():
                tokenizer = QwenTokenizer(tokenizer.embedding_key, tokenizer.embedding_size, min_length=1,
                                          pad_token=tokenizer.pad_token, embedding_lookup=tokenizer.embedding_lookup,
                                          backend=minimax_backend())
            own[slot] = tokenizer
        super().__init__(own)

    @property
    def qwen3vl_32b(self) -> Any:
        return getattr(self, self.slots[0])

    def _text(self, text: str) -> list[tuple]:
        if not text:
            return []
        chunks = self.qwen3vl_32b.tokenize_with_weights(text, False, disable_weights=True, min_length=0)
        if len(chunks) != 1:
            raise MiniMaxH3PromptError("MiniMax H3: a text segment longer than one chunk")
        return [(pair[0], 1.0) for pair in chunks[0]]

    @staticmethod
    def _vision(data: Any, video_block: bool = False) -> list[tuple]:
        entry = {"type": "image", "data": data, "original_type": "image"}
        if video_block:
            entry[VIDEO_BLOCK] = True
        return [(VISION_START, 1.0), (entry, 1.0), (VISION_END, 1.0)]

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, images: Sequence[Any] = (),
                              minimax_ref_items: Sequence[Mapping[str, Any]] | None = None,
                              **kwargs: Any) -> dict[str, list]:
        entries: list[tuple] = []
        if minimax_ref_items:
            counters = {"image": 0, "audio": 0, "video": 0}
            for item in minimax_ref_items:
                kind = item.get("type")
                if kind not in counters:
                    raise MiniMaxH3PromptError(f"MiniMax H3: a reference item of type {kind!r} (image, audio, video)")
                counters[kind] += 1
                if kind == "image":
                    entries += self._text("<Picture %d>: " % counters["image"]) + self._vision(item["data"])
                elif kind == "audio":
                    entries += self._text("<Audio %d>: " % counters["audio"])
                else:
                    frames = item["data"]  # [T, H, W, C] at 2 fps
                    stamps = item.get("timestamps")
                    stamps = [i / 2.0 for i in range(frames.shape[0])] if stamps is None else list(stamps)
                    if frames.shape[0] % 2 == 1:  # repeat the last frame to fill the temporal patch
                        frames = torch.cat([frames, frames[-1:]], dim=0)
                        stamps = stamps + [stamps[-1]]
                    entries += self._text("<Video %d>: " % counters["video"])
                    for i in range(0, frames.shape[0], 2):
                        entries += self._text("<%.1f seconds>" % ((stamps[i] + stamps[i + 1]) / 2.0))
                        entries += self._vision(frames[i:i + 2], video_block=True)
        else:
            for index, image in enumerate(images or ()):
                entries += self._text("<Picture %d>: " % (index + 1)) + self._vision(image)
        entries += self._text(text)
        if not entries:
            entries.append((PAD_ID, 1.0))
        if return_word_ids:
            entries = [pair + (0,) for pair in entries]
        return {TOKEN_KEY: [entries]}

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        return self.qwen3vl_32b.untokenize(token_weight_pair)


@dataclass(frozen=True)
class _VideoBlock:
    frames: torch.Tensor  # [2, H, W, C]


def video_block_patches(frames: torch.Tensor, config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A pair of frames [2, H, W, C] -> (patches [N, 3 * 2 * p * p], grid [1, 3] with one temporal
    patch): Qwen's resize (bilinear) and normalisation, the two frames filling the temporal patch."""
    if frames.ndim != 4 or frames.shape[0] != config.temporal_patch_size or frames.shape[-1] < 3:
        raise MiniMaxH3PromptError(f"MiniMax H3: a video block is {config.temporal_patch_size} frames [T, H, W, 3], "
                                   f"got {tuple(frames.shape)}")
    patch, merge, t = config.patch_size, config.spatial_merge_size, config.temporal_patch_size
    pixels = frames[..., :3].permute(0, 3, 1, 2).float()  # [2, 3, H, W]
    h_bar, w_bar = resized_size(pixels.shape[2], pixels.shape[3], patch * merge, MIN_PIXELS, MAX_PIXELS)
    pixels = F.interpolate(pixels, size=(h_bar, w_bar), mode="bilinear", align_corners=False)
    pixels = (pixels - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    grid_h, grid_w = h_bar // patch, w_bar // patch
    blocks = pixels.reshape(t, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    patches = blocks.permute(2, 5, 3, 6, 1, 0, 4, 7).reshape(grid_h * grid_w, 3 * t * patch * patch)
    return patches.contiguous(), torch.tensor([[1, grid_h, grid_w]], dtype=torch.long)


class _Tower:
    """The Qwen3-VL tower as `splice_images` reads it, a video block's pair of frames encoded as one
    temporal patch."""

    def __init__(self, tower: Any) -> None:
        self.tower = tower
        self.width, self.special_tokens = tower.width, tower.special_tokens

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tower.embed_ids(ids)

    def encode_image(self, data: Any) -> tuple:
        if not isinstance(data, _VideoBlock):
            return self.tower.encode_image(data)
        config = self.tower.config.vision
        if config is None:
            raise MiniMaxH3PromptError("MiniMax H3: this text encoder has no vision tower for reference videos")
        patches, grid = video_block_patches(data.frames, config)
        tokens, deepstack = encode_image_patches(self.tower.transformer.visual, config, patches, grid)
        return tokens, grid, deepstack


def token_tags(length: int, images: Sequence[tuple[int, int, Any]]) -> torch.Tensor:
    """[length] long: 0 over each vision block (its tokens and the start / end tokens around them), 1 elsewhere."""
    tags = torch.full((length,), TEXT_TAG, dtype=torch.long)
    for start, count, _ in images:
        tags[max(0, start - 1):start + count + 1] = VISION_TAG
    return tags


def encode_row(tower: Any, row: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token row -> (states [1, T, W] float32: the last block's output without the final norm,
    tags [T])."""
    row = [dict(t, data=_VideoBlock(t["data"])) if _is_image(t) and t.get(VIDEO_BLOCK) else t for t in row]
    features: list[list[torch.Tensor]] = []
    x, _mask, images = splice_images(_Tower(tower), row, "minimax", features)
    positions, deepstack, visual = None, [], None
    if images:
        visual = torch.zeros(x.shape[:2], dtype=torch.bool)
        for start, count, _ in images:
            visual[:, start:start + count] = True
        deepstack = [torch.cat([per_image[layer] for per_image in features]) for layer in range(len(features[0]))]
        positions = image_position_ids(images, x.shape[1], None, x.device)
    hidden = tower.encode_embeds(x, -1, False, None, positions, deepstack, visual)
    return hidden, token_tags(x.shape[1], images)


class MiniMaxH3TEModel(TextEncoderSet):
    """ComfyUI's `MiniMaxH3TEModel`: the one tower's states and the modality tags."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        (slot,) = self.slots
        key = self.spec.options(slot).token_key
        if key not in tokens:
            raise MiniMaxH3PromptError(f"tokens for MiniMax H3 lack key {key!r}; got keys {sorted(tokens)}")
        chunks = tokens[key]
        if len(chunks) != 1:
            raise MiniMaxH3PromptError(f"MiniMax H3 encodes one unpadded sequence, got {len(chunks)} chunks")
        with torch.no_grad():
            hidden, tags = encode_row(self.encoder(slot), [pair[0] for pair in chunks[0]])
        return hidden, None, {TOKEN_TAGS: tags}


MINIMAX_H3_TEXT_ENCODERS = EncoderSetSpec(
    "minimax_h3", (EncoderOptions(QWEN3VL_8B_SLOT, TOKEN_KEY, PAD_ID, -1, False, projected_pooled=False,
                                  prefixes=(f"text_encoders.{TOKEN_KEY}.transformer.",), kind="qwen3vl",
                                  nominal_width=QWEN3VL_32B_WIDTH, min_length=1),),
    QWEN3VL_8B_SLOT, set_class=MiniMaxH3TEModel, tokenizer_class=MiniMaxH3Tokenizer, clip_types=("minimax",))
