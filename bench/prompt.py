"""Prompt-language figures: parse throughput, encode time on a tiny CLIP, executor cache hits.

    .venv/bin/python bench/prompt.py [--seconds 1.0] [--encodes 100]

Prints:
- prompts/s for `parse_prompt_attention`, `get_learned_conditioning_prompt_schedules` (20 steps)
  and the whole pre-encode pipeline (AND split + schedules + attention) over a corpus of
  realistic prompts (emphasis, editing, alternation, AND, BREAK, escapes); the cold schedule
  figure is also given for webui's own parser (lark Earley, `schedule_earley`), with the ratio;
- seconds to encode 100 prompts of ~150 tokens (3 chunks with BREAK/backtrack) on the tiny SD1
  CLIP from tests/fixtures/checkpoints.py (random weights, width 64, 3 layers);
- whether running the same CLIPTextEncodeWeighted workflow twice hits the executor's cache.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from comfy_core.prompt import get_learned_conditioning_prompt_schedules, parse_prompt_attention  # noqa: E402
from comfy_core.prompt.conditioning import check_prompt  # noqa: E402
from comfy_core.prompt.schedule import parse_schedule_tree, render_schedule  # noqa: E402
from comfy_core.prompt.schedule_earley import parse_earley  # noqa: E402

CORPUS = [
    "masterpiece, best quality, (photorealistic:1.3), portrait of a woman, (freckles:0.8), soft light",
    "a [fantasy:cyberpunk:0.4] city at night, ((neon lights)), [rain|snow], wide angle, 35mm",
    "fantasy landscape with a [mountain:lake:0.25] and [an oak:a christmas tree:0.75]"
    "[ in foreground::0.6][: in background:0.25] [shoddy:masterful:0.5]",
    "a cat AND a dog:0.6 AND (sunset:1.2), highly detailed",
    "(((best quality))), ultra detailed, 1girl, [blue|red] hair, school uniform BREAK classroom, window, sunlight",
    "\\(parenthesized\\) text, 50\\% off, (emphasis:1.1), [de-emphasis], (nested [mixed (deep:1.4)] levels)",
    "oil painting of a [dog:cat:10] wearing a hat, by greg rutkowski, trending on artstation",
    "[[[very faint]]], ((((very strong)))), (a:1.2) (b:0.7) (c:1.0) [d] (e)",
    "portrait, [male|female|androgynous] astronaut, (helmet reflection:1.25), [stars::5], [:galaxy:8]",
    "a photo of sks dog in a bucket, (film grain:0.9), bokeh, f/1.8, [summer:autumn:0.5] leaves",
    "scenery, ((mountains)), river, forest, sky, clouds, (volumetric lighting:1.2), god rays BREAK "
    "lowres, bad anatomy, bad hands, text, error",
    "a [red:green:3] [square|circle] on a [white:black:.5] background AND minimal:0.5",
]


def throughput(fn, seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for prompt in CORPUS:
            fn(prompt)
        count += len(CORPUS)
    return count / (time.perf_counter() - start)


def long_prompts(n: int) -> list[str]:
    words = ("detailed intricate glowing ancient forest temple ruins mossy stone warm light "
             "cinematic dramatic clouds reflection water").split()
    prompts = []
    for i in range(n):
        body = ", ".join(" ".join(words[(i + j + k) % len(words)] for k in range(3)) for j in range(37))
        prompts.append(f"({words[i % len(words)]}:1.{i % 9}) {body} [a:b:{i % 20}]")
    return prompts


def tiny_checkpoint(folder: Path) -> Path:
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    target = folder / "models" / "checkpoints"
    target.mkdir(parents=True, exist_ok=True)
    return write_tiny_checkpoint(target / "tiny_sd1.safetensors", "sd1")


def encode_figures(ckpt: Path, count: int) -> None:
    import safetensors.torch

    from comfy_core.prompt.conditioning import PromptOptions, encode_prompt
    from comfy_core.prompt.encode import chunk_texts
    from comfy_core.families import encoder_set_for, encoder_sets
    from comfy_core.text_encoders.factory import build_clip, detect_text_encoders

    sd = safetensors.torch.load_file(str(ckpt))
    configs = detect_text_encoders(sd, encoder_sets())
    clip = build_clip(configs, sd, spec=encoder_set_for(configs))
    prompts = long_prompts(count)
    _, counts = chunk_texts([prompts[0]], clip.tokenizer.clip_tokenizer.encode)
    start = time.perf_counter()
    for prompt in prompts:  # distinct prompts: every schedule is parsed cold
        encode_prompt(clip, prompt, PromptOptions(steps=20))
    elapsed = time.perf_counter() - start
    print(f"encode: {count} prompts of ~{counts[0]} tokens (2 schedule texts each) on tiny SD1 CLIP: "
          f"{elapsed:.2f} s ({1000 * elapsed / count:.1f} ms/prompt)")


def cache_figures(base: Path) -> None:
    from graph.cache import CacheConfig
    from graph.executor import Executor
    from graph.native import Input, node
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    @node("BenchConditioningSink", inputs=[Input("conditioning", "CONDITIONING")], output_node=True)
    def sink(conditioning):
        return ()

    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(sink, builtin=False)
    env = Environment.rooted_at(base)
    env.ensure_dirs()
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny_sd1.safetensors"}},
        "2": {"class_type": "CLIPTextEncodeWeighted",
              "inputs": {"clip": ["1", 1], "text": long_prompts(1)[0], "emphasis": "Original", "steps": 20,
                         "scheduler": "normal", "negative": False, "comma_backtrack": 20,
                         "folder_embeddings": True}},
        "3": {"class_type": "BenchConditioningSink", "inputs": {"conditioning": ["2", 0]}},
    }
    executor = Executor(registry, cache=CacheConfig(), env=env)
    timings = []
    cached_sets = []
    for run in range(2):
        events = []
        start = time.perf_counter()
        outcome = asyncio.run(executor.execute(prompt, f"bench-{run}", outputs=["3"], sink=events.append))
        timings.append(time.perf_counter() - start)
        if outcome.status != "success":
            print(f"cache: run {run} ended with {outcome.status}: {outcome.messages[-1:]}")
            return
        cached = [e.data.get("nodes", []) for e in events if e.type == "execution_cached"]
        cached_sets.append(sorted(n for group in cached for n in group))
    hit = "2" in cached_sets[1]
    print(f"cache: first run {timings[0]:.3f} s, second run {timings[1]:.3f} s; cached nodes on rerun "
          f"{cached_sets[1]} -> CLIPTextEncodeWeighted {'HIT' if hit else 'MISSED'} the executor cache")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per parse figure")
    parser.add_argument("--encodes", type=int, default=100, help="prompts to encode")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (tiny models: 1 is fastest)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch threads: {args.threads}")
    print(f"corpus: {len(CORPUS)} prompts")
    print(f"parse_prompt_attention: {throughput(parse_prompt_attention, args.seconds):,.0f} prompts/s")
    def cold(fn):
        def run(prompt):
            parse_schedule_tree.cache_clear()  # measure the parse, not the memo
            fn(prompt)
        return run

    schedules = lambda p: get_learned_conditioning_prompt_schedules([p], 20)  # noqa: E731

    def earley_schedules(prompt):
        tree = parse_earley(prompt) if "[" in prompt else None
        return [[20, prompt]] if tree is None else render_schedule(tree, 20, base_steps=20)

    fast = throughput(cold(schedules), args.seconds)
    earley = throughput(earley_schedules, args.seconds)
    print(f"get_learned_conditioning_prompt_schedules (20 steps, cold): {fast:,.0f} prompts/s")
    print(f"  same with webui's lark Earley parser (reference, cold): {earley:,.1f} prompts/s "
          f"-> recursive descent is {fast / earley:,.0f}x faster")
    for prompt in CORPUS:  # fill the memo first: this figure is the warm path
        schedules(prompt)
    print(f"get_learned_conditioning_prompt_schedules (20 steps, memoised parse): "
          f"{throughput(schedules, args.seconds):,.0f} prompts/s")
    print(f"full pre-encode pipeline (AND, schedules, attention; cold): "
          f"{throughput(cold(check_prompt), args.seconds):,.0f} prompts/s")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = tiny_checkpoint(Path(tmp))
        encode_figures(ckpt, args.encodes)
        cache_figures(Path(tmp))


if __name__ == "__main__":
    main()
