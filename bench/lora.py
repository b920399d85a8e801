"""Patch + unpatch time of a rank-32 LoRA on a full-size random SD1.5 UNet, and of a repeat.

    .venv/bin/python bench/lora.py [--rank 32] [--repeat 3]

The UNet (860 M parameters, fp32, random values) is built from `UNetConfig()` (SD1.5). The LoRA
is kohya-named (diffusers UNet names) over every linear / 1x1 layer of the transformer blocks
(attention q/k/v/out, feed-forward, proj_in/out), as kohya's default SD1.5 training does.
Figures: parse (file tensors -> patches), first `applied()` entry (compute + swap in) and exit
(swap originals back), a second entry with the same patch set (patched weights come from the
cache: swaps only), and an entry without the cache (`cache_patched_weights=False`).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comfy_core.lora import load_lora_for_models, unet_key_map  # noqa: E402
from comfy_core.models.unet import UNetConfig, UNetModel  # noqa: E402
from comfy_core.patching import ModelPatcher  # noqa: E402

TARGETS = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k",
           "attn2.to_v", "attn2.to_out.0", "ff.net.0.proj", "ff.net.2", "proj_in", "proj_out")


def random_sd15_unet() -> nn.Module:
    with torch.device("meta"):
        unet = UNetModel(UNetConfig())
    unet = unet.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in unet.parameters():
            p.normal_(0.0, 0.02, generator=g)
    root = nn.Module()
    root.diffusion_model = unet
    return root.eval()


def kohya_lora(model: nn.Module, rank: int) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    g = torch.Generator().manual_seed(1)
    lora = {}
    for layer, key in unet_key_map(model).items():
        if not layer.startswith("lora_unet_down_blocks") and not layer.startswith("lora_unet_up_blocks") \
                and not layer.startswith("lora_unet_mid_block"):
            continue
        if not key.endswith(tuple(t + ".weight" for t in TARGETS)):
            continue
        w = params[key]
        lora[f"{layer}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.01
        lora[f"{layer}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * 0.01
        lora[f"{layer}.alpha"] = torch.tensor(float(rank))
    return lora


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    t_build, model = timed(random_sd15_unet)
    n_params = sum(p.numel() for p in model.parameters())
    lora = kohya_lora(model, args.rank)
    base = ModelPatcher(model)
    print(f"SD1.5 UNet: {n_params / 1e6:.0f} M parameters fp32 (built in {t_build:.1f} s); "
          f"rank-{args.rank} LoRA: {len(lora) // 3} layers, {sum(t.numel() for t in lora.values()) / 1e6:.1f} M values")
    t_parse, (patched, _, report) = timed(lambda: load_lora_for_models(base, None, lora, 1.0, 0.0, "bench"))
    print(f"parse + add_patches: {t_parse * 1e3:8.1f} ms  ({report.model_keys} weights patched)")

    def enter_exit(p):
        ctx = p.applied()
        t_in, _ = timed(ctx.__enter__)
        t_out, _ = timed(lambda: ctx.__exit__(None, None, None))
        return t_in, t_out

    first_in, first_out = enter_exit(patched)
    print(f"first use:   patch {first_in * 1e3:8.1f} ms   unpatch {first_out * 1e3:8.1f} ms")
    repeats = [enter_exit(patched) for _ in range(args.repeat)]
    best_in = min(r[0] for r in repeats)
    best_out = min(r[1] for r in repeats)
    print(f"same set again (best of {args.repeat}): patch {best_in * 1e3:8.3f} ms   unpatch {best_out * 1e3:8.3f} ms"
          f"   (weights computed: {patched.patch_stats.weights_computed}, from cache: {patched.patch_stats.weights_from_cache})")
    print(f"cached patched weights held: {patched.weight_cache_bytes() / 2**20:.0f} MiB")
    # What the executor pays per node that takes this MODEL (its value key, graph/value_keys.py).
    signature_s = min(timed(patched.cache_signature)[0] for _ in range(max(args.repeat, 5)))
    print(f"cache_signature() of the patched MODEL: {signature_s * 1e3:8.3f} ms")
    uncached = patched.clone()
    uncached.cache_patched_weights = False
    patched.drop_weight_cache()
    no_cache = [enter_exit(uncached) for _ in range(2)]
    print(f"without the cache (best of 2): patch {min(r[0] for r in no_cache) * 1e3:8.1f} ms   "
          f"unpatch {min(r[1] for r in no_cache) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
