"""The original Wan-AI umT5 checkpoint layout (`models_t5_umt5-xxl-enc-bf16.pth`), renamed to
transformers' / ComfyUI's `UMT5EncoderModel` names.

Wan's own encoder (Wan-Video/Wan2.1 `wan/modules/t5.py`: `T5Encoder` with `shared_pos=False`) names
its weights `token_embedding.weight`, per block N `blocks.N.norm1.weight`,
`blocks.N.attn.{q,k,v,o}.weight`, `blocks.N.norm2.weight`, `blocks.N.ffn.gate.0.weight` (the
GELU-gated branch: T5's `wi_0`), `blocks.N.ffn.fc1.weight` (`wi_1`), `blocks.N.ffn.fc2.weight`
(`wo`), `blocks.N.pos_embedding.embedding.weight` (that block's relative-attention table), and
`norm.weight` (the final RMS norm). The maths is the same as transformers' UMT5 encoder, so the
rename is all there is to it. diffusers / transformers files (`shared.weight`, `encoder.block...`)
already have ComfyUI's names.
"""
from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

WAN_MARKER = "blocks.0.attn.q.weight"
_FIXED = {"token_embedding.weight": "shared.weight", "norm.weight": "encoder.final_layer_norm.weight"}
_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
_IN_BLOCK = {
    "norm1.weight": "layer.0.layer_norm.weight",
    "attn.q.weight": "layer.0.SelfAttention.q.weight",
    "attn.k.weight": "layer.0.SelfAttention.k.weight",
    "attn.v.weight": "layer.0.SelfAttention.v.weight",
    "attn.o.weight": "layer.0.SelfAttention.o.weight",
    "pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
    "ffn.gate.0.weight": "layer.1.DenseReluDense.wi_0.weight",
    "ffn.fc1.weight": "layer.1.DenseReluDense.wi_1.weight",
    "ffn.fc2.weight": "layer.1.DenseReluDense.wo.weight",
}


def is_wan_layout(names: Any) -> bool:
    """Whether a file's tensor names are Wan's own umT5 layout."""
    return WAN_MARKER in names and "token_embedding.weight" in names and "norm.weight" in names


def wan_to_transformers_name(name: str) -> str:
    """One Wan umT5 name -> its `UMT5EncoderModel` name (unknown names are returned unchanged,
    so the T5 loader names them in its error)."""
    if name in _FIXED:
        return _FIXED[name]
    match = _BLOCK.fullmatch(name)
    if match and match.group(2) in _IN_BLOCK:
        return f"encoder.block.{match.group(1)}.{_IN_BLOCK[match.group(2)]}"
    return name


class RenamedMapping(Mapping[str, Any]):
    """A read-only view of `source` (a state dict or a safetensors header) under Wan -> transformers
    names; values are read from `source` only when asked for."""

    def __init__(self, source: Mapping[str, Any]) -> None:
        self._source = source
        self._names = {wan_to_transformers_name(name): name for name in source}

    def __getitem__(self, name: str) -> Any:
        return self._source[self._names[name]]

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
