"""ToMe's merge/unmerge and HyperTile's tiling on known tensors, and both patches in a
transformer block."""
from __future__ import annotations

import torch

from comfy_core.attention import attention
from comfy_core.model_patches.hypertile import from_tiles, hypertile, random_divisor, to_tiles
from comfy_core.model_patches.tome import bipartite_soft_matching_2d, merge_functions, token_merging
from comfy_core.models.transformer import BasicTransformerBlock


def test_tome_ratio_zero_and_lower_levels_are_the_identity() -> None:
    x = torch.randn(2, 64, 8)
    merge, unmerge = merge_functions(x, 0.0, [2, 4, 8, 8])
    assert merge(x) is x and unmerge(x) is x
    low = torch.randn(2, 16, 8)  # a quarter of the latent's tokens: the next level down
    merge, unmerge = merge_functions(low, 0.9, [2, 4, 8, 8])
    assert merge(low) is low


def test_tome_merges_r_tokens_into_their_most_similar_destination() -> None:
    """A 4x4 map whose 2x2 cells hold one token each: top-left destinations (no_rand), so every
    source's best destination is its own cell's; merging the r best-linked sources averages
    equal tokens, and unmerge restores the map exactly."""
    torch.manual_seed(0)
    cells = torch.randn(1, 4, 8)
    grid = cells.reshape(1, 2, 2, 8).repeat_interleave(2, 1).repeat_interleave(2, 2)  # [1, 4, 4, 8]
    x = grid.reshape(1, 16, 8)
    merge, unmerge = bipartite_soft_matching_2d(x, 4, 4, 2, 2, 6, no_rand=True)
    merged = merge(x)
    assert merged.shape == (1, 10, 8)
    torch.testing.assert_close(unmerge(merged), x)
    # The merged destinations are the cell tokens themselves (means of equal tokens).
    torch.testing.assert_close(merged[:, -4:], cells)


def test_tome_patch_pair_hands_the_unmerge_over_and_keeps_keys() -> None:
    merge_patch, unmerge_patch = token_merging(0.5)
    q = torch.randn(1, 64, 8)
    torch.manual_seed(1)
    mq, k, v = merge_patch(q, q, q, {"original_shape": [1, 4, 8, 8]})
    assert mq.shape == (1, 32, 8) and k is q and v is q
    assert unmerge_patch(mq, {}).shape == (1, 64, 8)


def test_tiles_round_trip_and_hold_the_spatial_blocks() -> None:
    x = torch.arange(2 * 6 * 4 * 3, dtype=torch.float32).reshape(2, 24, 3)  # 6 x 4 token maps
    tiles = to_tiles(x, 2, 2, 6, 4)
    assert tiles.shape == (8, 6, 3)
    grid = x.reshape(2, 6, 4, 3)
    assert torch.equal(tiles[1], grid[0, :3, 2:].reshape(6, 3))  # batch 0, tile row 0, column 1
    assert torch.equal(tiles[6], grid[1, 3:, :2].reshape(6, 3))
    assert torch.equal(from_tiles(tiles, 2, 2, 6, 4), x)


def test_random_divisor_counts_tiles_from_the_smallest_big_divisors() -> None:
    assert random_divisor(16, 4, 1) == 4  # divisors >= 4: 4, 8, 16 -> 16 // 4
    torch.manual_seed(0)
    assert {random_divisor(16, 4, 2) for _ in range(30)} <= {4, 2}
    assert random_divisor(3, 8, 2) == 1  # min capped at the value


def _block() -> BasicTransformerBlock:
    torch.manual_seed(0)
    block = BasicTransformerBlock(16, 2, 8, context_dim=12).eval()
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return block


def _patched(block, x, ctx, patches, shape):  # noqa: ANN001, ANN202
    with torch.no_grad():
        return block(x, ctx, transformer_options={"patches": patches, "original_shape": shape})


def test_hypertile_with_tiles_as_big_as_the_map_equals_the_unpatched_block() -> None:
    block = _block()
    x, ctx = torch.randn(2, 8 * 8, 16), torch.randn(2, 3, 12)
    tin, tout = hypertile(2048, 2, 0, False)
    with torch.no_grad():
        plain = block(x, ctx, transformer_options={"patches": {}})
    assert torch.equal(_patched(block, x, ctx, {"attn1_patch": [tin], "attn1_output_patch": [tout]}, [2, 4, 8, 8]), plain)


def test_hypertile_attends_per_query_tile_to_one_band_of_keys() -> None:
    """8x8 tokens, tile_size 32 -> 4-token tiles, one choice (swap 1): 2x2 tiles; each query tile
    attends to a contiguous quarter of the keys (ComfyUI's batch view of the keys)."""
    block = _block()
    x, ctx = torch.randn(2, 64, 16), torch.randn(2, 3, 12)
    tin, tout = hypertile(32, 1, 0, False)
    out = _patched(block, x, ctx, {"attn1_patch": [tin], "attn1_output_patch": [tout]}, [2, 4, 8, 8])
    with torch.no_grad():
        a = block.attn1
        n = block.norm1(x)
        q = a.to_q(to_tiles(n, 2, 2, 8, 8))
        k, v = a.to_k(n).reshape(8, 16, 16), a.to_v(n).reshape(8, 16, 16)
        h = from_tiles(a.to_out(attention(q, k, v, 2)), 2, 2, 8, 8) + x
        h = block.attn2(block.norm2(h), ctx) + h
        expected = block.ff(block.norm3(h)) + h
    torch.testing.assert_close(out, expected)
    # Levels below max_depth are left alone.
    small = torch.randn(2, 16, 16)
    with torch.no_grad():
        plain = block(small, ctx, transformer_options={"patches": {}})
    assert torch.equal(_patched(block, small, ctx, {"attn1_patch": [tin], "attn1_output_patch": [tout]}, [2, 4, 8, 8]), plain)
