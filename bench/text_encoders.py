"""Text-encoder figures: tokenizer build and throughput, full-size CLIP-L build (meta + assign) and
encode time. Prints figures; asserts nothing.

    .venv/bin/python bench/text_encoders.py [--threads 2] [--skip-full]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "a photo of a cat, (masterpiece:1.2), highly detailed, 8k, sharp focus",
    "portrait of an old sailor, (weathered skin:1.3), dramatic lighting, ((film grain)), by a famous painter",
    "landscape, mountains at sunrise, mist, (golden hour:1.1), wide angle, trending on artstation " * 3,
    "café crème on a wooden table, naïve style, 日本語, ❤️, bokeh",
]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_tokenizer() -> None:
    from comfy_core.families import encoder_set_for
    from comfy_core.text_encoders.factory import make_tokenizer
    from comfy_core.text_encoders.config import ClipTextConfig
    from comfy_core.text_encoders.tokenizer import ClipTokenizer

    from comfy_core.text_encoders.vocab import load_vocabulary

    t = time.perf_counter()
    import transformers.models.clip.tokenization_clip  # noqa: F401  (import cost, once per process)
    print(f"tokenizer: transformers import {time.perf_counter() - t:.3f} s")
    t = time.perf_counter()
    vocabulary = load_vocabulary()
    print(f"tokenizer: vocabulary derivation {time.perf_counter() - t:.3f} s")
    t = time.perf_counter()
    clip_tokenizer = ClipTokenizer(vocabulary)
    print(f"tokenizer: build {time.perf_counter() - t:.3f} s")
    config = ClipTextConfig("clip_l", "p.", "hf", 768, 12, 12, 3072, 49408, 77, 768, False, "quick_gelu")
    family = make_tokenizer([config], clip_tokenizer, spec=encoder_set_for([config]))
    n = 0
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0:
        for prompt in PROMPTS:
            family.tokenize_with_weights(prompt)
            n += 1
    elapsed = time.perf_counter() - t
    print(f"tokenizer: ComfyUI weighted tokenization {n / elapsed:.0f} prompts/s (avg {sum(map(len, PROMPTS)) / len(PROMPTS):.0f} chars)")


def random_clip_l_checkpoint() -> dict[str, torch.Tensor]:
    """SD1.5's CLIP-L text encoder with random weights, under the checkpoint's key names."""
    from transformers import CLIPTextConfig, CLIPTextModel

    # OpenAI CLIP ViT-L/14's text tower, as in SD1.x checkpoints.
    config = CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                            max_position_embeddings=77, projection_dim=768, hidden_act="quick_gelu")
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in CLIPTextModel(config).state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    return {f"cond_stage_model.transformer.text_model.{k}": torch.randn(s, generator=gen) * 0.02
            for k, s in shapes.items()}


def bench_full_clip_l() -> None:
    from comfy_core.families import encoder_set_for, encoder_sets
    from comfy_core.text_encoders import build_clip, detect_text_encoders

    sd = random_clip_l_checkpoint()
    params = sum(v.numel() for v in sd.values())
    print(f"CLIP-L: {params / 1e6:.1f} M params, fp32 {params * 4 / 2**20:.0f} MiB; peak RSS so far {_peak_rss_mib():.0f} MiB")
    t = time.perf_counter()
    configs = detect_text_encoders(sd, encoder_sets())
    clip = build_clip(configs, sd, spec=encoder_set_for(configs))
    print(f"CLIP-L: detect + build_clip (meta + assign, no copy) {time.perf_counter() - t:.3f} s; "
          f"peak RSS {_peak_rss_mib():.0f} MiB")
    tokens = clip.tokenize(PROMPTS[0])
    clip.encode_from_tokens(tokens)  # warm-up
    for label, text in (("unweighted", "a photo of a cat"), ("weighted (adds the empty prompt)", PROMPTS[0]),
                        ("2 chunks + weights", PROMPTS[2])):
        tokens = clip.tokenize(text)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            clip.encode_from_tokens(tokens)
            times.append(time.perf_counter() - t)
        print(f"CLIP-L encode {label}: best {min(times):.3f} s, median {sorted(times)[1]:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-full", action="store_true", help="skip the full-size CLIP-L figures")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads")
    bench_tokenizer()
    if not args.skip_full:
        bench_full_clip_l()


if __name__ == "__main__":
    main()
