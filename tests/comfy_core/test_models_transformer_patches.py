"""ComfyUI's attention patch points in the transformer block (attn1 and attn2 alike)."""
from __future__ import annotations

import torch

from comfy_core.models.transformer import BasicTransformerBlock


def _block() -> tuple[BasicTransformerBlock, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    block = BasicTransformerBlock(dim=16, n_heads=2, d_head=8, context_dim=12).eval()
    return block, torch.randn(2, 5, 16), torch.randn(2, 3, 12)


def test_patch_points_without_patches_match_the_plain_forward() -> None:
    block, x, ctx = _block()
    with torch.no_grad():
        plain = block(x, ctx)
        options = block(x, ctx, transformer_options={"patches": {}, "block": ("input", 1)})
    assert torch.equal(plain, options)


def test_input_patches_see_self_and_cross_context_and_output_patches_see_extra() -> None:
    block, x, ctx = _block()
    seen: dict[str, tuple] = {}

    def in_patch(kind: str):
        def patch(n, context, value, extra):  # noqa: ANN001, ANN202
            seen[kind] = (n.shape, context.shape, value is context, extra["n_heads"], extra["dim_head"])
            return n, context, value
        return patch

    def out_patch(n, extra):  # noqa: ANN001, ANN202
        seen.setdefault("out", []).append(n.shape)
        return n * 0

    patches = {"attn1_patch": [in_patch("attn1")], "attn2_patch": [in_patch("attn2")],
               "attn1_output_patch": [out_patch], "attn2_output_patch": [out_patch]}
    with torch.no_grad():
        out = block(x, ctx, transformer_options={"patches": patches})
        ff_only = block.ff(block.norm3(x)) + x  # both attentions zeroed by the output patches
    assert seen["attn1"] == (x.shape, x.shape, True, 2, 8)
    assert seen["attn2"] == (x.shape, ctx.shape, True, 2, 8)
    assert seen["out"] == [x.shape, x.shape]
    torch.testing.assert_close(out, ff_only)


def test_replacements_get_projected_qkv_and_their_result_goes_through_to_out() -> None:
    """As ComfyUI's BasicTransformerBlock: a `patches_replace` function receives to_q/to_k/to_v
    outputs (keyed `(block, number, block_index)` first, then `(block, number)`), and its
    result is projected by to_out; standard attention as the replacement reproduces the block."""
    from comfy_core.attention import attention

    block, x, ctx = _block()
    calls: list[tuple] = []

    def replace(kind: str):
        def fn(q, k, v, extra):  # noqa: ANN001, ANN202
            calls.append((kind, q.shape, k.shape, v.shape))
            return attention(q, k, v, extra["n_heads"])
        return fn

    options = {"block": ("output", 2), "block_index": 0,
               "patches_replace": {"attn1": {("output", 2, 0): replace("attn1")},
                                   "attn2": {("output", 2): replace("attn2")}}}
    with torch.no_grad():
        out = block(x, ctx, transformer_options=options)
        plain = block(x, ctx)
    assert calls == [("attn1", (2, 5, 16), (2, 5, 16), (2, 5, 16)), ("attn2", (2, 5, 16), (2, 3, 16), (2, 3, 16))]
    torch.testing.assert_close(out, plain)


def test_replacement_keys_use_the_block_index_inside_the_transformer() -> None:
    block, x, ctx = _block()
    calls: list[int] = []
    table = {("input", 4, 1): lambda q, k, v, extra: calls.append(extra["block_index"]) or q}
    with torch.no_grad():
        block(x, ctx, transformer_options={"block": ("input", 4), "block_index": 0,
                                           "patches_replace": {"attn1": table}})
        block(x, ctx, transformer_options={"block": ("input", 4), "block_index": 1,
                                           "patches_replace": {"attn1": table}})
    assert calls == [1]


def test_middle_patch_runs_between_self_and_cross_attention() -> None:
    block, x, ctx = _block()
    seen: list[torch.Tensor] = []

    def middle(h, extra):  # noqa: ANN001, ANN202
        seen.append(h.clone())
        return h * 0

    with torch.no_grad():
        out = block(x, ctx, transformer_options={"patches": {"middle_patch": [middle]}})
        after_attn1 = block.attn1(block.norm1(x)) + x
        zero = torch.zeros_like(x)
        expected = block.attn2(block.norm2(zero), ctx) + zero
        expected = block.ff(block.norm3(expected)) + expected
    torch.testing.assert_close(seen[0], after_attn1)
    torch.testing.assert_close(out, expected)
