"""What value keys save: a text-to-image workflow with a LoRA, edited the way people edit it.

    .venv/bin/python bench/value_cache.py [--steps 10] [--size 256]

Builds a tiny SD1 checkpoint and two LoRA files in a temporary folder (tests/fixtures), then runs
the same sequence of edits on two executors, one keying on structure alone (ComfyUI's rule,
`Executor(value_keys=False)`) and one with value keys (graph/value_keys.py, the default). For
each edit it prints the seconds and the nodes that ran. The model is tiny, so the seconds are
small; on a real SD1.5 UNet one sampling step takes ~16 s on this machine (bench/sampling.py),
and every edit where KSampler does not run saves all of its steps.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAMES = {"4": "Checkpoint", "10": "LoraLoader", "6": "Encode+", "7": "Encode-", "5": "EmptyLatent",
         "3": "KSampler", "8": "VAEDecode", "9": "Sink"}

EDITS = [
    ("first run", dict(lora="a.safetensors", strength_model=0.0, strength_clip=0.0, seed=1)),
    ("LoRA file changed at strength 0", dict(lora="b.safetensors", strength_model=0.0, strength_clip=0.0, seed=1)),
    ("LoRA strength_model 0 -> 1", dict(lora="a.safetensors", strength_model=1.0, strength_clip=0.0, seed=1)),
    ("LoRA strength_clip 0 -> 0.5 (prompts use the base CLIP)",
     dict(lora="a.safetensors", strength_model=1.0, strength_clip=0.5, seed=1)),
    ("seed changed", dict(lora="a.safetensors", strength_model=1.0, strength_clip=0.5, seed=2)),
]


def workflow(steps: int, size: int, lora: str, strength_model: float, strength_clip: float, seed: int) -> dict:
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "10": {"class_type": "LoraLoader", "inputs": {"model": ["4", 0], "clip": ["4", 1], "lora_name": lora,
                                                      "strength_model": strength_model,
                                                      "strength_clip": strength_clip}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse at dusk", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": size, "height": size, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["10", 0], "seed": seed, "steps": steps, "cfg": 7.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
    }


def prepare(root: Path) -> None:
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint
    from tests.fixtures.loras import write_unet_lora

    path = write_tiny_checkpoint(root / "models" / "checkpoints" / "tiny.safetensors", "sd1")
    (root / "models" / "loras").mkdir(parents=True)
    model, _, _ = load_checkpoint(path, output_vae=False, output_clip=False)
    for name, seed in (("a", 1), ("b", 2)):
        write_unet_lora(root / "models" / "loras" / f"{name}.safetensors", model, seed, rank=4, scale=0.1,
                        targets=("to_q.weight", "to_v.weight"))


async def run_edits(root: Path, value_keys: bool, steps: int, size: int) -> list[tuple[float, list[str]]]:
    from graph.executor import Executor
    from graph.registry import Registry
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    env = Environment.rooted_at(root)
    env.ensure_dirs()
    registry = Registry()
    register_builtin_nodes(registry)
    calls: Counter = Counter()
    executor = Executor(registry, env=env, value_keys=value_keys,
                        before_node_call=[lambda node_id, _i, _g: calls.update([node_id])])
    results = []
    for index, (_label, edit) in enumerate(EDITS):
        prompt = workflow(steps, size, **edit)
        checked = await validate_prompt(prompt, registry, env=env)
        assert checked.ok, checked.node_errors
        calls.clear()
        start = time.perf_counter()
        out = await executor.execute(prompt, f"edit{index}", outputs=checked.outputs)
        seconds = time.perf_counter() - start
        assert out.status == "success", out.error
        results.append((seconds, [NAMES[n] for n in prompt if n in calls]))
    executor.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--size", type=int, default=256, help="image size in pixels")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_value_cache_"))
    try:
        prepare(root)
        structural = await run_edits(root, False, args.steps, args.size)
        by_value = await run_edits(root, True, args.steps, args.size)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"tiny SD1 checkpoint, euler {args.steps} steps, {args.size}x{args.size}; seconds and nodes that ran")
    print(f"{'edit':58} {'structure only':>15} {'with value keys':>16}")
    for (label, _), (t_s, ran_s), (t_v, ran_v) in zip(EDITS, structural, by_value):
        print(f"{label:58} {t_s:14.2f}s {t_v:15.2f}s")
        print(f"{'':4}structure only: {', '.join(ran_s)}")
        print(f"{'':4}value keys:     {', '.join(ran_v)}")


if __name__ == "__main__":
    asyncio.run(main())
