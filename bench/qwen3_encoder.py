"""Qwen3 text-encoder figures (Z-Image's Qwen3-4B): Qwen tokenizer build and throughput, and the time
of Qwen3-4B-width blocks (hidden 2560, 32 / 8 heads of 128, SwiGLU 9728) stored in bf16 and computed
in float32 by our tower, beside transformers' `Qwen3Model` running the same float32 weights; a few
blocks only, random weights, and the per-block figure extrapolated to the 35 blocks Z-Image runs
(marked so). Prints figures; asserts nothing.

    .venv/bin/python bench/qwen3_encoder.py [--threads 2] [--blocks 2] [--tokens 64]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = "a photo of a cat sleeping on a windowsill, soft morning light, (film grain), 35mm, 日本語 ❤️ "


def bench_tokenizer() -> None:
    from comfy_core.text_encoders.qwen_tokenizer import build_qwen_tokenizer

    t = time.perf_counter()
    tokenizer = build_qwen_tokenizer()
    print(f"tokenizer: build from the shipped merges {time.perf_counter() - t:.2f} s")
    text = PROMPT * 40
    t = time.perf_counter()
    for _ in range(20):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
    elapsed = (time.perf_counter() - t) / 20
    print(f"tokenizer: {len(text)} chars -> {len(ids)} tokens in {elapsed * 1e3:.2f} ms")


def bench_blocks(blocks: int, tokens: int) -> None:
    from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder
    from transformers import Qwen3Config as HFConfig, Qwen3Model

    shape = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=blocks, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936)
    hf_config = HFConfig(**shape, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         tie_word_embeddings=True, use_cache=False)
    hf_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    reference = Qwen3Model(hf_config).eval()
    state = {"model." + k: v.to(torch.bfloat16) for k, v in reference.state_dict().items()}
    reference.load_state_dict({k[len("model."):]: v.float() for k, v in state.items()})
    config = Qwen3Config.detect_from_weights(state, "")
    tower = build_qwen3_encoder(config, state)
    ids = torch.randint(0, 151_000, (1, tokens))
    with torch.no_grad():
        tower.encode_ids(ids, layer_idx=None)  # warm-up
        reference(input_ids=ids)
        t = time.perf_counter()
        ours = tower.encode_ids(ids, layer_idx=None)
        ours_s = time.perf_counter() - t
        t = time.perf_counter()
        theirs = reference(input_ids=ids).last_hidden_state
        theirs_s = time.perf_counter() - t
    print(f"blocks: {blocks} Qwen3-4B-width blocks, {tokens} tokens, bf16 storage -> float32 compute: "
          f"ours {ours_s / blocks * 1e3:.1f} ms/block, transformers (float32 weights) "
          f"{theirs_s / blocks * 1e3:.1f} ms/block, max |diff| {(ours - theirs).abs().max().item():.2e}")
    print(f"blocks: extrapolated to Z-Image's 35 blocks (of 36): ~{ours_s / blocks * 35:.2f} s per prompt "
          "(EXTRAPOLATED, not measured)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bench_tokenizer()
    bench_blocks(args.blocks, args.tokens)


if __name__ == "__main__":
    main()
