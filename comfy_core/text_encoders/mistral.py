"""The Mistral Small 3 text tower (Mistral AI, January 2025, "Mistral Small 3", 24B): FLUX.2 dev's
text encoder, as ComfyUI runs it (`comfy/text_encoders/llama.py`: `Mistral3Small24BConfig`,
`Mistral3Small24B`; `flux.py`: `Mistral3_24BModel`, `Flux2TEModel`; `sd.py`: `TEModel.MISTRAL3_24B`,
`MISTRAL3_24B_PRUNED_FLUX2`).

Mistral is the Llama architecture (transformers' `MistralModel` without sliding windows is
`LlamaModel` with other numbers), so this tower is the Llama tower of `llama.py` with Mistral's
config: 5120 wide, 40 blocks, 32 query and 8 key/value heads of 128, SwiGLU 32768, vocabulary
131072, RMS epsilon 1e-5, rope theta 1e9 (default RoPE, no scaling). Weights: the Hugging Face
`model.*` layout (ComfyUI's `mistral_3_small_flux2_{bf16,fp8}.safetensors`), plus the `tekken_model`
tensor (the tokenizer, `tekken_tokenizer.py`) which is not a weight. ComfyUI's "pruned" files keep
blocks 0..29 only and run without the final norm.

Telling Mistral from Llama 3.1 (HiDream) files, both `model.layers.N.self_attn.q_proj` without QK
norms or biases: a Mistral file carries `tekken_model`, or is 5120 wide (ComfyUI's test), or has
Mistral's 131072-token table (Llama 3's has 128256).

States: ComfyUI's `intermediate_output=[10, 20, 30]`: the *input* of blocks 10, 20 and 30 (the
outputs of blocks 9, 19, 29; transformers' `hidden_states[10]`, `[20]`, `[30]`), no norm; a layer
equal to the block count is the final output (normed when the model has its final norm). Special
tokens: start 1 (`<s>`), pad 0 (the attention mask is 1 up to the first 0; the tokenizer pads with
11, so every token counts, as in ComfyUI).

Ministral 3 3B (Mistral AI, December 2025; ERNIE-Image's text encoder and its prompt enhancer, ComfyUI's
`llama.py`: `Ministral3_3BConfig`, `Ministral3_3B`; `ernie.py`; `sd.py`: `TEModel.MINISTRAL_3_3B`) is
the same Llama-shaped tower with other numbers: 3072 wide, 26 blocks, 32 query and 8 key/value heads
of 128, SwiGLU 9216, rope theta 1e6 (ComfyUI applies none of the release's YaRN scaling), the final
norm kept, the LM head tied to the token table. ComfyUI tells it from Mistral Small 3 by its width
(3072, where Mistral Small 3 is 5120); a tower that is neither 3072 nor 5120 wide (our tiny test
files) is Ministral when it has Ministral's 26 blocks (Mistral Small 3 has 40, its pruned Flux.2
file 30). Its slot is `ministral3_3b`, its tower `MinistralTextEncoder`, which also generates text
(ComfyUI's `Ministral3_3B` is a `BaseGenerate`: stop token `</s>` (2), the tied head).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import prenorm_block
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.llama import (LlamaConfig, LlamaKeyError, LlamaOptions, LlamaTextEncoder,
                                            build_llama_encoder, is_plain_decoder)
from comfy_core.text_encoders.qwen3 import attention_bias, rotary_tables, token_mask
from comfy_core.text_encoders.tekken_tokenizer import TEKKEN_KEY
from comfy_core.text_encoders.token_chunks import chunks_to_ids

MISTRAL_SLOT = "mistral3_24b"
MISTRAL_WIDTH = 5120
MISTRAL_VOCAB = 131_072
MISTRAL_FULL_LAYERS = 40  # ComfyUI: fewer blocks = the pruned Flux.2 file, run without the final norm
START_ID = 1  # <s>
PAD_ID = 0  # the model's pad (ComfyUI's special_tokens["pad"]); the tokenizer pads with 11
FLUX2_LAYERS = (10, 20, 30)
MINISTRAL_SLOT = "ministral3_3b"
MINISTRAL_WIDTH = 3072
MINISTRAL_LAYERS = 26
MINISTRAL_ROPE_THETA = 1_000_000.0
MINISTRAL_STOP_TOKENS = (2,)  # </s>: ComfyUI's Ministral3_3BConfig.stop_tokens


def is_mistral(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether a Llama-architecture decoder under `prefix` is Mistral (see the module doc); names
    and shapes only."""
    if not is_plain_decoder(tensors, prefix):
        return False
    if prefix + TEKKEN_KEY in tensors:
        return True
    embed = tensors.get(prefix + "model.embed_tokens.weight")
    shape = tuple(int(d) for d in getattr(embed, "shape", ()))
    return len(shape) == 2 and (shape[0] == MISTRAL_VOCAB or shape[1] == MISTRAL_WIDTH)


@dataclass(frozen=True)
class MistralConfig(LlamaConfig):
    """One Mistral decoder used as a text encoder; what shapes cannot show is ComfyUI's
    `Mistral3Small24BConfig` (head width 128, RMS epsilon 1e-5, rope theta 1e9)."""

    rope_theta: float = 1_000_000_000.0
    slot: str = MISTRAL_SLOT

    @property
    def final_norm(self) -> bool:
        """ComfyUI's `final_norm`: off for the pruned (fewer than 40 blocks) Mistral Small 3 files;
        Ministral 3 3B keeps it."""
        return self.slot == MINISTRAL_SLOT or self.num_layers >= MISTRAL_FULL_LAYERS

    @property
    def is_ministral(self) -> bool:
        return self.slot == MINISTRAL_SLOT

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            head_dim: int = 128) -> "MistralConfig | None":
        """The config of the Mistral tower under `prefix`, or None when there is none (no decoder,
        or a Llama 3 / Qwen / Gemma one). Raises `LlamaDetectionError` for inconsistent towers."""
        if not is_mistral(tensors, prefix):
            return None
        config = super().detect_from_weights(tensors, prefix, head_dim)
        if config is not None and is_ministral_shape(config.hidden_size, config.num_layers):
            config = dataclasses.replace(config, slot=MINISTRAL_SLOT, rope_theta=MINISTRAL_ROPE_THETA)
        return config  # type: ignore[return-value]


def is_ministral_shape(width: int, blocks: int) -> bool:
    """Ministral 3 3B rather than Mistral Small 3 (see the module doc): 3072 wide (ComfyUI's test),
    or, at a width that is neither model's, Ministral's 26 blocks."""
    return width == MINISTRAL_WIDTH or (width != MISTRAL_WIDTH and blocks == MINISTRAL_LAYERS)


class _Without(Mapping[str, Any]):
    """A mapping without one key (the tokenizer tensor is not a weight)."""

    def __init__(self, tensors: Mapping[str, Any], key: str) -> None:
        self._tensors, self._key = tensors, key

    def __getitem__(self, name: str) -> Any:
        if name == self._key:
            raise KeyError(name)
        return self._tensors[name]

    def __iter__(self):
        return (name for name in self._tensors if name != self._key)

    def __len__(self) -> int:
        return len(self._tensors) - (self._key in self._tensors)

    def __contains__(self, name: object) -> bool:
        return name != self._key and name in self._tensors


class MistralTextEncoder(LlamaTextEncoder):
    """One Mistral tower (ComfyUI's `Mistral3_24BModel` surface): the Llama tower's blocks and
    token handling with Mistral's special tokens; `stacked_states` is Flux.2's use of it."""

    def __init__(self, config: MistralConfig, transformer: Any) -> None:
        super().__init__(config, transformer)
        self.options = self.default_options = LlamaOptions(slot=config.slot, token_key=config.slot, pad_token=PAD_ID,
                                                           start_token=START_ID, all_layers=False)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"start": int(getattr(self.options, "start_token", START_ID)),
                "pad": int(getattr(self.options, "pad_token", PAD_ID))}

    def intermediate_states(self, ids: torch.Tensor, mask: torch.Tensor | None,
                            layers: Sequence[int]) -> list[torch.Tensor]:
        """ids [B, T] -> ComfyUI's `intermediate_output=layers` states, each `[B, T, W]` float32:
        layer i < blocks is the input of block i, layer == blocks the final output (normed when the
        model has its final norm); the blocks after the last wanted layer are not run."""
        config = self.config
        if any(not 0 <= layer <= config.num_layers for layer in layers):
            raise TokenizeError(f"mistral: layers {tuple(layers)} are outside this {config.num_layers}-block model")
        x = self.embed_ids(ids)  # [B, T, W]
        length = ids.shape[1]
        cos, sin = rotary_tables(length, config.head_dim, config.rope_theta, x.device)
        bias = attention_bias(mask, length, x.device)
        wanted, out = set(layers), {}
        model = self.transformer.model
        for index, block in enumerate(model.layers):
            if index in wanted:
                out[index] = x.float()
            if len(out) == len(wanted):
                break
            x = self._block(block, x, cos, sin, bias)
        if config.num_layers in wanted:
            out[config.num_layers] = (compute_in_float32(model.norm, x) if config.final_norm else x).float()
        return [out[layer] for layer in layers]

    def stacked_states(self, rows: Sequence[Sequence[Any]], layers: Sequence[int] = FLUX2_LAYERS) -> tuple:
        """Token rows -> (the states of `layers` stacked per token `[B, T, len(layers) * W]`, the
        token mask `[B, T]`): ComfyUI's `Flux2TEModel.encode_token_weights`."""
        ids, overrides = chunks_to_ids([list(r) for r in rows], self.width, mismatch_pad=self.special_tokens["pad"])
        if overrides:
            raise TokenizeError("Flux.2: prompt embeddings are not supported by its Mistral text encoder")
        mask = token_mask(rows, self.special_tokens["pad"])  # [B, T]
        states = self.intermediate_states(ids, mask, layers)
        return torch.cat(states, dim=-1), mask


class MinistralTextEncoder(MistralTextEncoder):
    """Ministral 3 3B (ComfyUI's `Ministral3_3BModel` / `Ministral3_3B`): one hidden state per token
    (the set's layer, ERNIE-Image's -2: the output of the next-to-last block, no final norm), and
    text generation (the Qwen3 tower's key/value-cache decoding through Llama blocks, the token
    table as the head, stop token `</s>`)."""

    can_generate = True
    stop_tokens = MINISTRAL_STOP_TOKENS

    def encode_ids(self, ids: torch.Tensor, overrides: Sequence[Any] = (), layer_idx: int | None = None,
                   layer_norm_hidden: bool = False, attention_mask: torch.Tensor | None = None,
                   all_layers: bool | None = None) -> torch.Tensor:
        """ids [B, T] -> the one selected state [B, T, W] float32 (never HiDream's "all" stack)."""
        return super().encode_ids(ids, overrides, layer_idx=layer_idx, layer_norm_hidden=layer_norm_hidden,
                                  attention_mask=attention_mask, all_layers=bool(all_layers))

    def _block(self, block: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
               cache: Any = None, layer: int = 0) -> torch.Tensor:
        """One Llama block; with a cache (generation) its keys and values join block `layer`'s."""
        return prenorm_block(block, x, cos, sin, bias, self.config, cache=cache, layer=layer)


def build_mistral_encoder(config: MistralConfig, state_dict: Mapping[str, torch.Tensor],
                          dtype: torch.dtype | None = None) -> MistralTextEncoder:
    """The Llama tower's build (meta device, then the file's tensors assigned) on Mistral's config;
    the file's `tekken_model` tensor is the tokenizer's, not a weight."""
    if config.prefix + TEKKEN_KEY in state_dict:
        state_dict = _Without(state_dict, config.prefix + TEKKEN_KEY)
    try:
        llama = build_llama_encoder(config, state_dict, dtype)
    except LlamaKeyError as exc:
        raise LlamaKeyError(str(exc).replace("Llama", "Mistral")) from None
    return (MinistralTextEncoder if config.is_ministral else MistralTextEncoder)(config, llama.transformer)


__all__ = ["FLUX2_LAYERS", "MINISTRAL_SLOT", "MINISTRAL_WIDTH", "MISTRAL_SLOT", "MinistralTextEncoder",
           "MistralConfig", "MistralTextEncoder", "PAD_ID", "START_ID", "build_mistral_encoder",
           "is_ministral_shape", "is_mistral"]
