"""Real-width pack parity: packs' workflows on this server and on ComfyUI with REAL-width random
SD1.5 files, images compared.

    python bench/pack_parity_real.py --packs-dir PACKS --pack NAME [--pack NAME ...]
        --comfyui COMFYUI_DIR --comfy-python COMFY_PY [--python PY] [--cache DIR] WORKFLOW.json [...]

As bench/pack_parity.py, except for the files: packs that hard-code SD1.5's widths (AnimateDiff-
Evolved's motion modules are 320/640/1280 wide) cannot run on the tiny fixtures, so every
checkpoint a workflow names is one random fp16 SD1.5 file at the real widths (UNet 320x(1,2,4,4),
CLIP-L 768x12, VAE 128x(1,2,4,4)), written once into `--cache` and linked in; ComfyUI then
detects it as the real SD1.5 (no bench/comfyui_tiny_models shim). Motion modules named by
AnimateDiff-Evolved's loaders are `tests.fixtures.motion_modules.write_motion_module` at its
default (real) widths. The servers run one after the other, never both at once, so only one
holds the ~4 GB fp32 UNet in memory.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_parity import PACK_LOADER_INPUTS, REPO, Server, common_parser, compare_images, work_folders  # noqa: E402  (the sibling script)

DEFAULT_CACHE = Path("/work/scratch/real_models")
REAL_SD15_NAME = "sd15_real_random_fp16.safetensors"
MOTION_NAME = "mm_sd_v15_v2_random.safetensors"
# AnimateDiff-Evolved's loaders -> the models folder their file lives in
ADE_LOADER_INPUTS = {
    ("ADE_AnimateDiffLoaderGen1", "model_name"): "animatediff_models",
    ("ADE_LoadAnimateDiffModel", "model_name"): "animatediff_models",
    ("ADE_AnimateDiffLoaderWithContext", "model_name"): "animatediff_models",
    ("AnimateDiffLoaderV1", "model_name"): "animatediff_models",
    ("ACN_ControlNetLoaderAdvanced", "cnet"): "controlnet",
}


def write_real_sd15(path: Path, seed: int = 0) -> Path:
    """A random fp16 single-file SD1.5 checkpoint at the real widths (keys and shapes of
    v1-5-pruned-emaonly), values from tests.fixtures.checkpoints' fan-in scaled initialiser."""
    import torch
    from safetensors.torch import save_file

    from tests.fixtures import checkpoints as ck

    depth_in, depth_out = ck._sd_depths(4, (0, 1, 2))
    unet = ck._UNetArch(320, (1, 2, 4, 4), 2, depth_in, 1, depth_out, context_dim=768, linear_proj=False)
    shapes = {**ck.unet_shapes(unet), **ck.vae_shapes(ck._VAEArch(ch=128, ch_mult=(1, 2, 4, 4), num_res_blocks=2)),
              **ck.hf_clip_shapes("cond_stage_model.transformer.", 768, 12)}
    gen = torch.Generator().manual_seed(seed)
    # one tensor at a time to fp16: the fp32 whole would need 4 GB more
    tensors = {name: ck._random_value(name, shape, gen).to(torch.float16) for name, shape in sorted(shapes.items())}
    tensors["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(ck.POSITIONS)[None]
    for name, value in ck.schedule_buffers().items():
        tensors[name] = value.to(torch.float16)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(partial), metadata={"format": "pt"})
    partial.rename(path)
    return path


def cached(cache: Path, name: str, writer) -> Path:
    target = cache / name
    if not target.exists():
        print(f"writing {target} (once)", flush=True)
        writer(target)
    return target


def provide_real_files(prompt: dict, shared: Path, cache: Path) -> None:
    """Link the real-width checkpoint / motion module under every name `prompt`'s loaders use;
    other files (images, ControlNets, ...) come from the tiny writers as in pack_parity.py."""
    from tests.fixtures.motion_modules import write_motion_module
    from tests.fixtures.template_models import LOADER_INPUTS, provide_files

    for node in prompt.values():
        for name, value in node.get("inputs", {}).items():
            folder = LOADER_INPUTS.get((node["class_type"], name))
            if folder not in ("checkpoints", "animatediff_models") or not isinstance(value, str):
                continue
            source = (cached(cache, REAL_SD15_NAME, write_real_sd15) if folder == "checkpoints"
                      else cached(cache, MOTION_NAME, write_motion_module))
            target = shared / "models" / folder / value
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(source)
    # the rest from the tiny writers, which know no motion modules (already linked above)
    rest = {nid: {**node, "inputs": {k: v for k, v in node.get("inputs", {}).items()
                                     if LOADER_INPUTS.get((node["class_type"], k)) != "animatediff_models"}}
            for nid, node in prompt.items()}
    provide_files(rest, shared)


def main(argv: list[str] | None = None) -> int:
    parser = common_parser(__doc__, timeout=1200.0)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    from tests.fixtures.template_models import LOADER_INPUTS

    LOADER_INPUTS.update(PACK_LOADER_INPUTS)
    LOADER_INPUTS.update(ADE_LOADER_INPUTS)

    packs = [args.packs_dir / name for name in args.pack]
    prompts = {wf.stem: json.loads(wf.read_text()) for wf in args.workflows}
    tmp, shared = work_folders("pack_parity_real_")
    for prompt in prompts.values():
        provide_real_files(prompt, shared, args.cache)
    specs = [("ours", [args.python, str(REPO / "main.py")], REPO, tmp / "ours"),
             ("ComfyUI", [args.comfy_python, str(args.comfyui / "main.py")], args.comfyui, tmp / "comfy")]
    results: dict[str, dict[str, dict]] = {}
    try:
        for name, command, cwd, base in specs:
            server = Server(name, command, cwd, base, shared, packs)
            try:
                server.wait_ready(args.timeout)
                for wf, prompt in prompts.items():
                    entry = server.run(prompt, args.timeout)
                    results.setdefault(wf, {})[name] = entry if "error" in entry else {"images": server.images(entry)}
                    print(f"{wf:36} {name}: {entry.get('error', 'done')}", flush=True)
            finally:
                server.stop()
        for wf in prompts:
            for line in compare(results[wf]["ours"], results[wf]["ComfyUI"]):
                print(f"{wf:36} {line}", flush=True)
    finally:
        if args.keep:
            print("base directories:", tmp)
    return 0


def compare(ours: dict, theirs: dict) -> list[str]:
    """Per output node and image: the largest and mean difference in 0..255 levels."""
    if "error" in ours or "error" in theirs:
        return [f"ours: {ours.get('error', 'ok')} | ComfyUI: {theirs.get('error', 'ok')}"]
    return compare_images(ours["images"], theirs["images"])


if __name__ == "__main__":
    raise SystemExit(main())
