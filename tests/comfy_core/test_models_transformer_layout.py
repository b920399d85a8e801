"""Tensor layouts inside the SpatialTransformer, as ComfyUI's (comfy/ldm/modules/attention.py) makes them.

A transposed view handed on instead of a contiguous copy computes the same numbers in exact
arithmetic, but CPU kernels (oneDNN convolutions, MKL matmuls) take other code paths for
channels-last or strided operands and round differently. The last-bit differences stay invisible
for fixed-step samplers and become different step sequences (up to 3 levels of 255) in
`dpm_adaptive`, whose accept/reject decisions compare tiny errors.
"""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.transformer import SpatialTransformer


@pytest.mark.parametrize("use_linear", [False, True], ids=["conv_proj", "linear_proj"])
def test_projections_and_blocks_get_contiguous_tensors(use_linear: bool) -> None:
    torch.manual_seed(0)
    st = SpatialTransformer(in_channels=32, n_heads=2, d_head=16, depth=2, context_dim=24,
                            use_linear=use_linear).eval()
    x = torch.randn(2, 32, 4, 3)  # H != W and both > 1, so channels-last is not also contiguous
    context = torch.randn(2, 5, 24)
    seen: dict[str, torch.Tensor] = {}

    def record(name: str):
        def hook(_module, args):  # noqa: ANN001, ANN202
            seen[name] = args[0]
        return hook

    modules = {"proj_in": st.proj_in, "proj_out": st.proj_out,
               **{f"block{i}": b for i, b in enumerate(st.transformer_blocks)}}
    handles = [m.register_forward_pre_hook(record(name)) for name, m in modules.items()]
    try:
        with torch.no_grad():
            out = st(x, context)
    finally:
        for h in handles:
            h.remove()

    assert set(seen) == set(modules)
    strided = {name: tuple(t.stride()) for name, t in seen.items() if not t.is_contiguous()}
    assert strided == {}, f"non-contiguous inputs (name: strides): {strided}"
    assert out.is_contiguous()
    assert out.shape == x.shape



def test_vae_attention_hands_a_contiguous_image_to_proj_out() -> None:
    from comfy_core.models.vae import AttnBlock

    torch.manual_seed(0)
    block = AttnBlock(32).eval()
    seen: list[torch.Tensor] = []
    handle = block.proj_out.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            block(torch.randn(1, 32, 4, 3))
    finally:
        handle.remove()
    assert seen and seen[0].is_contiguous()
