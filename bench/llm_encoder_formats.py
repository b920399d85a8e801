"""Storage formats of the LLM text encoders: a Qwen3 tower at Qwen3-4B's block width (hidden 2560,
32 / 8 heads of 128, SwiGLU 9728; a few blocks and a small token table, random weights) written as
bf16 safetensors, ComfyUI's scaled-fp8 (legacy marker + scale_weight), and GGUF Q8_0 / Q4_K
(llama.cpp names; Q4_K from random blocks, as the gguf package cannot quantise K-quants), each
loaded through CLIPLoader's loader (`load_text_encoders`) in a fresh process. Printed per format:
file size, load time, RssAnon / RssFile after the load, the encode time of one prompt (per block,
and extrapolated to Z-Image's 35 blocks: marked so), and the largest difference of the states
from the bf16 file's, relative to their largest value (not for Q4_K, whose random blocks are
weights of their own). Prints figures; asserts nothing.

    .venv/bin/python bench/llm_encoder_formats.py [--blocks 2] [--tokens 64] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = dict(hidden_size=2560, intermediate_size=9728, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
             vocab_size=4096)
ZIMAGE_BLOCKS = 35


def _state(blocks: int) -> dict[str, torch.Tensor]:
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict

    return tiny_qwen3_state_dict(seed=0, num_hidden_layers=blocks, **SHAPE)


def write_files(folder: Path, blocks: int) -> dict[str, Path]:
    from safetensors.torch import save_file

    from tests.comfy_core.test_gguf_text_encoders import random_blocks, write_gguf
    from tests.comfy_core.test_scaled_fp8_encoders import quantise

    state = _state(blocks)
    paths = {"bf16": folder / "qwen3_bf16.safetensors", "scaled fp8": folder / "qwen3_fp8_scaled.safetensors",
             "GGUF Q8_0": folder / "qwen3-Q8_0.gguf", "GGUF Q4_K": folder / "qwen3-Q4_K.gguf"}
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(paths["bf16"]))
    scaled, _ = quantise(state, "legacy")
    save_file(scaled, str(paths["scaled fp8"]))
    linear = [n for n, t in state.items() if t.dim() == 2 and "embed_tokens" not in n]
    write_gguf(paths["GGUF Q8_0"], state, "qwen3", types={n: "Q8_0" for n in linear})
    raw = {n: ("Q4_K", random_blocks("Q4_K", *state[n].shape, seed=i, scale=2.5e-4)) for i, n in enumerate(linear)}
    write_gguf(paths["GGUF Q4_K"], state, "qwen3", raw=raw)
    return paths


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def child(path: str, tokens: int, threads: int, out: str) -> None:
    """Load one file and encode one prompt; write the figures and the states to `out`."""
    torch.set_num_threads(threads)
    from transformers import Qwen3Model  # noqa: F401  (imported before measuring: not the weights' memory)

    from comfy_core.split.text_encoder_files import load_text_encoders
    from comfy_core.text_encoders.qwen_tokenizer import build_qwen_tokenizer

    build_qwen_tokenizer()  # the shipped vocabulary's one-time cost, likewise
    before = _status()
    start = time.perf_counter()
    clip = load_text_encoders([path], "lumina2")
    load = time.perf_counter() - start
    after = _status()
    tower = clip.cond_stage_model.qwen3_4b
    ids = torch.randint(0, SHAPE["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tower.encode_ids(ids, layer_idx=None)  # warm-up
        start = time.perf_counter()
        states = tower.encode_ids(ids, layer_idx=None)
        encode = time.perf_counter() - start
    torch.save(states, out + ".pt")
    Path(out).write_text(json.dumps({"load": load, "anon": after["RssAnon"] - before["RssAnon"],
                                     "file": after["RssFile"] - before["RssFile"], "encode": encode}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.tokens, args.threads, args.child[1])
        return
    with tempfile.TemporaryDirectory() as folder:
        paths = write_files(Path(folder), args.blocks)
        reference = None
        print(f"Qwen3 tower, Qwen3-4B block width, {args.blocks} blocks, {args.tokens} tokens, {args.threads} threads")
        print(f"{'format':<11} {'file MB':>8} {'load s':>7} {'anon MB':>8} {'file-backed MB':>15} "
              f"{'s/block':>8} {'35 blocks s (extrapolated)':>27} {'max rel. diff vs bf16':>22}")
        for name, path in paths.items():
            out = str(Path(folder) / (path.name + ".json"))
            subprocess.run([sys.executable, __file__, "--blocks", str(args.blocks), "--tokens", str(args.tokens),
                            "--threads", str(args.threads), "--child", str(path), out], check=True)
            figures = json.loads(Path(out).read_text())
            states = torch.load(out + ".pt")
            if reference is None:
                reference = states
            diff = f"{float((states - reference).abs().max() / reference.abs().max()):.2e}"
            if name == "GGUF Q4_K":
                diff = "n/a (own weights)"
            per_block = figures["encode"] / args.blocks
            print(f"{name:<11} {path.stat().st_size / 2**20:>8.1f} {figures['load']:>7.2f} "
                  f"{figures['anon'] / 2**20:>8.1f} {figures['file'] / 2**20:>15.1f} {per_block:>8.3f} "
                  f"{per_block * ZIMAGE_BLOCKS:>27.2f} {diff:>22}")


if __name__ == "__main__":
    main()
