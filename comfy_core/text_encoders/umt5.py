"""Wan's text encoder: umT5-XXL (Chung et al. 2023, "UniMax: Fairer and More Effective Language
Sampling for Large-Scale Multilingual Pretraining"), as ComfyUI 0.3.64's
`comfy/text_encoders/wan.py` sets it up.

umT5 is T5 v1.1 (gated-GELU feed-forward, RMS norms, no attention scaling; vocab 256384, d_model
4096, 24 blocks, 64 heads, d_ff 10240) with a relative-attention table in every block
(`encoder.block.N.layer.0.SelfAttention.relative_attention_bias.weight`), run by our T5 tower
(`t5.T5TextEncoder` with `T5Config.relative_attention_per_block`). ComfyUI's `UMT5XXlModel`
switches: special tokens end 1, pad 0; the attention mask is used (`enable_attention_masks`:
pad keys are not attended) and `zero_out_masked` (states after the prompt's end token are
zeros); not returned with the conditioning. The tokenizer is the file's own SentencePiece model
(`umt5_tokenizer.py`), min length 512, so a short prompt gives CONDITIONING `[1, 512, 4096]`.

The tower's classes have ComfyUI's names (`UMT5XXlModel`, `UMT5XXlTokenizer`); Wan's set of it
(`WanT5Model`, `WanT5Tokenizer`, CLIPLoader's type) is Wan's: comfy_core/families/wan/text_encoders.py.
"""
from __future__ import annotations

from typing import Mapping

import torch

from comfy_core.text_encoders.t5 import T5TextEncoder, build_t5_encoder
from comfy_core.text_encoders.t5_config import T5Config
from comfy_core.text_encoders.umt5_tokenizer import SPIECE_KEY, UMT5_MIN_LENGTH, UMT5XXlTokenizer  # noqa: F401

UMT5_WIDTH = 4096


class UMT5XXlModel(T5TextEncoder):
    """ComfyUI's `UMT5XXlModel` (an `SDClipModel`): the T5 tower with the attention mask in force
    and the states after the end token zeroed; the mask is not returned."""

    zero_out_masked = True

    def __init__(self, config: T5Config, transformer: torch.nn.Module, attention_mask: bool = True) -> None:
        super().__init__(config, transformer, attention_mask=True)
        self.return_attention_masks = False


def build_umt5_encoder(config: T5Config, state_dict: Mapping[str, torch.Tensor],
                       dtype: torch.dtype | None = None) -> UMT5XXlModel:
    """The umT5 tower from a state dict in ComfyUI's / transformers' names (see `t5.build_t5_encoder`)."""
    return build_t5_encoder(config, state_dict, dtype, attention_mask=True, encoder_class=UMT5XXlModel)
