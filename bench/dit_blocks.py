"""Benchmark: Flux.1-dev and SD3.5-large blocks at full width: seconds per block per step, peak
memory per block by storage dtype, and the full-depth figures extrapolated from them.

The whole 12 B Flux (or 8 B SD3.5-large) takes minutes per step on two CPU cores, so the models are
built at full WIDTH with only a few blocks (Flux.1-dev: hidden 3072, 24 heads, T5 context 4096,
pooled 768, guidance embedding; default 1 double + 1 single block. SD3.5-large: depth 38 -> hidden
2432, 38 heads, RMS QK-norm, 192x192 position table; default 2 joint blocks, the second being the
pre-only last block). Random weights in the real key layout (BFL names for Flux, SAI names for
SD3.5, from the layouts in tests/fixtures/{flux,mmdit}_files.py, written independently of the
modules) are written as a bf16 `.safetensors` file to a temp folder, and each (model, storage)
case runs in a fresh process (so its peak RSS is its own), which:

- loads the file: through `comfy_core.split.diffusion_model.load_diffusion_model` where that
  loader takes DiT files (`--loader engine`/`auto`), else (`auto`'s fallback, `--loader direct`)
  by building `Flux` / `MMDiT` on the meta device from `FluxConfig` / `MMDiTConfig`
  `.detect_from_weights(header)` and `load_state_dict(assign=True, strict=True)`; the storage
  dtype is `--storage` (fp32, bf16, fp8_e4m3fn, fp8_e4m3fn_fast); when it differs from the compute
  dtype (`--dtype`, float32 by default) every layer casts its weights as it runs
  (`comfy_core.models.storage_cast.cast_weights_at_run_time`, ComfyUI's manual cast);
- runs the model once with every block replaced by an identity (ComfyUI's `patches_replace["dit"]`
  hook) to capture each block's inputs at the requested resolution; the time of that pass is the
  "rest" of a step (patchify, embedders, RoPE / position table, final layer, unpatchify);
- times each block on its captured inputs (`--runs` runs, median, after a warm-up on truncated
  inputs) and measures its peak memory: CPU: the RSS high-water mark is reset
  (`/proc/self/clear_refs` 5) before the block runs, so "transient" is the block's own growth
  above the resident weights (activations, the weights cast for the layer running); CUDA: the
  allocator's peak above what is allocated before the call.

The full-depth figures (Flux.1: 19 double + 38 single blocks; SD3.5-large: 37 joint + 1 pre-only
joint block; plus the rest) are EXTRAPOLATED from the per-block medians and weight sizes, and
printed as such. With `--device cuda` the same runs on the GPU, and the whole full-depth model
(random weights made on the GPU, no file) is timed as it/s when the GPU's free memory allows.

Batch 1; text tokens as ComfyUI's prompts give for a short prompt (Flux: T5 min_length 256; SD3.5:
77 CLIP + 77 T5), `--text-tokens` to change. 1024x1024 = latent 128x128 = 4096 image tokens for
both (patch 2). Commands (the default, 512x512: 3 min 16 s wall, 1 min 50 s CPU, on a shared 2-core
machine at load 4-6):

    .venv/bin/python bench/dit_blocks.py
    .venv/bin/python bench/dit_blocks.py --resolution 1024 --runs 3
    .venv/bin/python bench/dit_blocks.py --models flux --flux-double 1 --flux-single 1 --storage fp32,fp8_e4m3fn
    .venv/bin/python bench/dit_blocks.py --device cuda --resolution 1024 --storage bf16,fp8_e4m3fn
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.dit_files import (MODELS, STORAGES, build_from_shapes, load_module, model_shapes,  # noqa: E402
                             module_bytes, random_tensor, storage_dtype, write_random_file)

# Full-depth block counts of the released models (Flux.1-dev / schnell; SD3.5-large / large turbo).
FULL_DEPTH = {"flux": {"double": 19, "single": 38}, "sd35": {"joint": 37, "joint_pre_only": 1}}
# Text tokens of a short prompt as ComfyUI's tokenizers pad it (T5 min_length 256 for Flux; SD3:
# 77 CLIP-L/G tokens + 77 T5 tokens).
TEXT_TOKENS = {"flux": 256, "sd35": 154}
MB = 2 ** 20


# -- inputs, captured block arguments, block calls ------------------------------------------------

def model_inputs(model: str, module: Any, resolution: int, text_tokens: int, device: Any, dtype: Any,
                 seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of one step's `forward` at `resolution` pixels (latent = resolution / 8,
    16 channels), batch 1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    side = resolution // 8

    def randn(*shape: int) -> Any:
        return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

    x = randn(1, 16, side, side)  # [B, 16, H/8, W/8]
    if model == "flux":
        config = module.config
        inputs = {"x": x, "timestep": torch.full((1,), 0.5, device=device, dtype=dtype),
                  "context": randn(1, text_tokens, config.context_in_dim), "y": randn(1, config.vec_in_dim)}
        if config.guidance_embed:
            inputs["guidance"] = torch.full((1,), 3.5, device=device, dtype=dtype)
        return inputs
    context_in = module.context_embedder.in_features
    adm = module.y_embedder.mlp[0].in_features
    return {"x": x, "timesteps": torch.full((1,), 500.0, device=device, dtype=dtype),
            "context": randn(1, text_tokens, context_in), "y": randn(1, adm)}


def block_list(model: str, module: Any) -> list[tuple[str, tuple[str, int], Any]]:
    """`[(kind, patches_replace key, block)]` in running order; kinds: Flux "double"/"single",
    SD3.5 "joint" and "joint_pre_only" (the last block, whose text stream feeds attention only)."""
    if model == "flux":
        return ([("double", ("double_block", i), b) for i, b in enumerate(module.double_blocks)]
                + [("single", ("single_block", i), b) for i, b in enumerate(module.single_blocks)])
    last = len(module.joint_blocks) - 1
    return [("joint_pre_only" if i == last and hasattr(module, "final_layer") else "joint", ("double_block", i), b)
            for i, b in enumerate(module.joint_blocks)]


def capture_block_inputs(model: str, module: Any, inputs: Mapping[str, Any],
                         captured: dict | None = None) -> Any:
    """One forward with every block an identity (ComfyUI's `patches_replace["dit"]`), each
    block's arguments copied into `captured[key]`; returns the forward's output."""
    import torch

    def identity(key: tuple[str, int]) -> Callable[[dict, dict], dict]:
        def replace(args: dict, extra: dict) -> dict:
            if captured is not None:
                captured[key] = {k: v.clone() if torch.is_tensor(v) else v for k, v in args.items()
                                 if k != "transformer_options"}
            return {k: args[k] for k in ("img", "txt") if k in args}
        return replace

    dit = {key: identity(key) for _, key, _ in block_list(model, module)}
    return module(**inputs, transformer_options={"patches_replace": {"dit": dit}})


def block_call(model: str, kind: str, block: Any, args: Mapping[str, Any]) -> Callable[[], Any]:
    """A call of `block` on its captured arguments (the call `forward` makes)."""
    if model == "flux" and kind == "double":
        return lambda: block(img=args["img"], txt=args["txt"], vec=args["vec"], pe=args["pe"],
                             attn_mask=args.get("attn_mask"), transformer_options={})
    if model == "flux":
        return lambda: block(args["img"], vec=args["vec"], pe=args["pe"], attn_mask=args.get("attn_mask"),
                             transformer_options={})
    return lambda: block(args["txt"], args["img"], c=args["vec"], transformer_options={})


def truncated(args: Mapping[str, Any], tokens: int = 16) -> dict[str, Any]:
    """The arguments with every token sequence cut to its first `tokens` (a cheap warm-up of the
    same kernels): `img`/`txt` `[B, N, C]`, Flux's `pe` `[B, 1, N, d/2, 2, 2]` cut to match."""
    out = dict(args)
    for name in ("img", "txt"):
        if name in args:
            out[name] = args[name][:, :tokens]
    if args.get("pe") is not None:
        out["pe"] = args["pe"][:, :, :tokens * (2 if "txt" in args else 1)]
    return out


# -- measuring -------------------------------------------------------------------------------------

def _status_kb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return float("nan")


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far, all threads (steadier than wall time on
    a shared machine: on an idle one, wall ~ CPU / threads)."""
    times = os.times()
    return times.user + times.system


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (VmHWM) to its current RSS (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(call: Callable[[], Any], device: Any, runs: int, warmup: Callable[[], Any] | None = None) -> dict:
    """`{"seconds": [per run], "median_s", "cpu_s" (median CPU seconds), "transient_bytes",
    "finite"}`: `call()` run `runs` times; transient = peak memory during the runs above what was held before them (CPU: RSS
    high-water mark, reset first; CUDA: the allocator's peak)."""
    import torch

    cuda = torch.device(device).type == "cuda"
    with torch.inference_mode():
        if warmup is not None:
            warmup()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            reset = reset_peak_rss()
            base = _status_kb("VmRSS")
        seconds, cpu, finite = [], [], True
        for _ in range(runs):
            start, cpu_start = time.perf_counter(), _cpu_s()
            out = call()
            if cuda:
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            cpu.append(_cpu_s() - cpu_start)
            tensors = out if isinstance(out, tuple) else (out,)
            finite = finite and all(bool(torch.isfinite(t).all()) for t in tensors if torch.is_tensor(t))
            del out, tensors
        peak = torch.cuda.max_memory_allocated() if cuda else _status_kb("VmHWM")
    result = {"seconds": seconds, "median_s": statistics.median(seconds), "cpu_s": statistics.median(cpu),
              "transient_bytes": max(0, peak - base),
              "finite": finite}
    if not cuda and not reset:
        result["transient_note"] = "clear_refs not writable: process-wide peak"
    return result


def run_case(case: Mapping[str, Any]) -> dict:
    """One (model, storage) case: load, capture the blocks' inputs, time and measure each block.

    `case`: model, path, storage, device, dtype (compute), resolution, text_tokens, runs, loader,
    threads (None: torch's default)."""
    import torch

    if case.get("threads"):
        torch.set_num_threads(int(case["threads"]))
    model, device = case["model"], torch.device(case["device"])
    compute = getattr(torch, case["dtype"])
    base_rss = _status_kb("VmRSS")
    start = time.perf_counter()
    module, how = load_module(model, Path(case["path"]), case["storage"], device, compute, case["loader"])
    load_s = time.perf_counter() - start
    load_peak = _status_kb("VmHWM")
    loaded_rss = _status_kb("VmRSS")
    inputs = model_inputs(model, module, case["resolution"], case["text_tokens"], device, compute)
    captured: dict = {}
    with torch.inference_mode():
        out = capture_block_inputs(model, module, inputs, captured)
    rest = measure(lambda: capture_block_inputs(model, module, inputs), device, case["runs"])
    blocks = []
    for kind, key, block in block_list(model, module):
        args = captured[key]
        timing = measure(block_call(model, kind, block, args), device, case["runs"],
                         warmup=block_call(model, kind, block, truncated(args)))
        blocks.append({"kind": kind, "index": key[1], "tokens": int(args["img"].shape[1]) + (
            int(args["txt"].shape[1]) if "txt" in args else 0), "weights_bytes": module_bytes(block), **timing})
    total = module_bytes(module)
    return {"model": model, "storage": case["storage"], "device": str(device), "dtype": case["dtype"],
            "loader": how, "load_s": load_s, "base_rss": base_rss, "load_peak_rss": load_peak,
            "loaded_rss": loaded_rss, "weights_bytes": total,
            "rest": {**rest, "weights_bytes": total - sum(b["weights_bytes"] for b in blocks)},
            "blocks": blocks, "output_shape": list(out.shape), "image_tokens": int((case["resolution"] // 16) ** 2)}


def free_memory(device: Any) -> int | None:
    """Free bytes on a CUDA device (its cache returned first); None on the CPU (no whole model)."""
    import torch

    if torch.device(device).type != "cuda":
        return None
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(device)[0]


def whole_model_case(case: Mapping[str, Any], free: int | None = None) -> dict:
    """The full-depth model (`case["depth"]`, blocks by kind, to change it) with random weights
    made on the device, timed whole (it/s), when its weights fit in `free` bytes (default: the
    GPU's free memory; none on the CPU) with a margin; else why not."""
    import torch

    model, device = case["model"], torch.device(case["device"])
    compute = getattr(torch, case["dtype"])
    dtype = storage_dtype(case["storage"])
    full = FULL_DEPTH["flux"] if model == "flux" else {"joint": sum(FULL_DEPTH["sd35"].values())}
    full = case.get("depth") or full  # blocks by kind; a smaller model for the smoke test
    shapes = model_shapes(model, full, tiny=case.get("tiny", False))
    need = sum(math.prod(s) for s in shapes.values()) * torch.empty((), dtype=dtype).element_size()
    free = free_memory(device) if free is None else free
    if free is None:
        return {"skipped": "the whole model is measured on CUDA only"}
    if need * 1.15 + 8 * 2 ** 30 > free:
        return {"skipped": f"needs {need / 2**30:.1f} GiB of weights, {free / 2**30:.1f} GiB free"}
    from comfy_core.models.storage_cast import cast_weights_at_run_time

    generator = torch.Generator(device=device).manual_seed(0)
    state = {name: random_tensor(name, tuple(shape), generator, dtype, device) for name, shape in shapes.items()}
    module = build_from_shapes(model, state)
    module.load_state_dict(state, strict=True, assign=True)
    del state
    module.eval()
    if dtype != compute:
        cast_weights_at_run_time(module, fp8_matrix_mult=case["storage"] == "fp8_e4m3fn_fast")
    inputs = model_inputs(model, module, case["resolution"], case["text_tokens"], device, compute)
    timing = measure(lambda: module(**inputs), device, case["runs"], warmup=lambda: module(**inputs))
    return {"weights_bytes": module_bytes(module), "it_per_s": 1.0 / timing["median_s"], **timing}


# -- extrapolation and report ----------------------------------------------------------------------

def extrapolate(result: Mapping[str, Any], depth: Mapping[str, int] | None = None) -> dict:
    """Full-depth step time and weights from one case's per-block medians (EXTRAPOLATED):
    sum over block kinds of count x (median over the measured blocks of that kind), plus the
    rest; peak = weights + the largest transient (+ the process baseline on the CPU)."""
    depth = FULL_DEPTH[result["model"]] if depth is None else depth
    seconds, cpu = result["rest"]["median_s"], result["rest"].get("cpu_s", 0.0)
    weights = result["rest"]["weights_bytes"]
    transient = result["rest"]["transient_bytes"]
    for kind, count in depth.items():
        measured = [b for b in result["blocks"] if b["kind"] == kind]
        if not measured:
            raise ValueError(f"{result['model']}: no {kind} block measured; the extrapolation needs one "
                             f"(SD3.5: at least 2 joint blocks, the last being pre-only)")
        seconds += count * statistics.median(b["median_s"] for b in measured)
        cpu += count * statistics.median(b.get("cpu_s", 0.0) for b in measured)
        weights += count * statistics.median(b["weights_bytes"] for b in measured)
        transient = max(transient, max(b["transient_bytes"] for b in measured))
    base = result["base_rss"] if result["device"] == "cpu" else 0
    return {"step_s": seconds, "cpu_s": cpu, "weights_bytes": weights, "peak_bytes": base + weights + transient}


def format_case(result: Mapping[str, Any], resolution: int) -> list[str]:
    runs = len(result["rest"]["seconds"])
    head = (f"{result['model']} {result['storage']} storage, {result['dtype']} compute, {result['device']}, "
            f"{resolution}x{resolution} ({result['image_tokens']} image tokens), batch 1, median of {runs} run(s)")
    lines = [head, f"  loaded by {result['loader']} in {result['load_s']:.1f} s: weights "
                   f"{result['weights_bytes'] / MB:.0f} MB, RSS {result['loaded_rss'] / MB:.0f} MB "
                   f"(load peak {result['load_peak_rss'] / MB:.0f} MB, baseline {result['base_rss'] / MB:.0f} MB)"]
    for b in result["blocks"]:
        lines.append(f"  {b['kind'] + ' ' + str(b['index']):17s} {b['median_s']:8.3f} s/step (cpu {b['cpu_s']:7.2f} s)   "
                     f"weights {b['weights_bytes'] / MB:7.0f} MB + transient {b['transient_bytes'] / MB:5.0f} MB = "
                     f"block peak {(b['weights_bytes'] + b['transient_bytes']) / MB:6.0f} MB   tokens {b['tokens']}   runs {' '.join(f'{s:.3f}' for s in b['seconds'])}"
                     f"{'' if b['finite'] else '   NON-FINITE OUTPUT'}")
    rest = result["rest"]
    lines.append(f"  {'embed+final':17s} {rest['median_s']:8.3f} s/step (cpu {rest['cpu_s']:7.2f} s)   weights {rest['weights_bytes'] / MB:7.0f} MB + "
                 f"transient {rest['transient_bytes'] / MB:5.0f} MB")
    full = extrapolate(result)
    depth = " + ".join(f"{n} {k}" for k, n in FULL_DEPTH[result["model"]].items())
    lines.append(f"  EXTRAPOLATED full depth ({depth} + embed/final): {full['step_s']:.1f} s/step "
                 f"(cpu {full['cpu_s']:.1f} s), "
                 f"weights {full['weights_bytes'] / 2**30:.2f} GiB, peak ~{full['peak_bytes'] / 2**30:.2f} GiB")
    if result.get("whole"):
        whole = result["whole"]
        if "skipped" in whole:
            lines.append(f"  whole model: skipped ({whole['skipped']})")
        else:
            lines.append(f"  whole full-depth model MEASURED: {whole['it_per_s']:.3f} it/s ({whole['median_s']:.3f} s/step), "
                         f"weights {whole['weights_bytes'] / 2**30:.2f} GiB, peak +{whole['transient_bytes'] / 2**30:.2f} GiB")
    return lines


def format_summary(results: list[Mapping[str, Any]]) -> list[str]:
    """One line per (model, storage): each block kind's median s/step and peak (its weights + its
    largest transient), and the extrapolated full-depth step and peak."""
    lines = ["summary (block peak = block weights + transient; full depth EXTRAPOLATED):"]
    for r in results:
        parts = []
        for kind in FULL_DEPTH[r["model"]]:
            measured = [b for b in r["blocks"] if b["kind"] == kind]
            peak = max(b["weights_bytes"] + b["transient_bytes"] for b in measured)
            parts.append(f"{kind} {statistics.median(b['median_s'] for b in measured):.3f} s "
                         f"(cpu {statistics.median(b['cpu_s'] for b in measured):.2f} s), {peak / MB:.0f} MB")
        full = extrapolate(r)
        lines.append(f"  {r['model']:5s} {r['storage']:16s} " + "; ".join(parts)
                     + f"; full {full['step_s']:.1f} s/step (cpu {full['cpu_s']:.1f} s), "
                       f"~{full['peak_bytes'] / 2**30:.1f} GiB")
    return lines


def run_child(case: Mapping[str, Any]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(case)], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{case['model']} {case['storage']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_main(case: Mapping[str, Any]) -> dict:
    result = run_case(case)
    if case.get("whole"):
        result["whole"] = whole_model_case(case)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: flux, sd35")
    parser.add_argument("--storage", default="fp32,bf16,fp8_e4m3fn",
                        help=f"comma-separated storage dtypes, of {','.join(STORAGES)} (the first is timed --runs "
                             f"times, the others --storage-runs times)")
    parser.add_argument("--resolution", type=int, default=512, help="image side in pixels (latent = side / 8)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per block for the first storage (median)")
    parser.add_argument("--storage-runs", type=int, default=1, help="timed runs per block for the other storages")
    parser.add_argument("--flux-double", type=int, default=1, help="Flux double blocks built")
    parser.add_argument("--flux-single", type=int, default=1, help="Flux single blocks built")
    parser.add_argument("--sd35-blocks", type=int, default=2, help="SD3.5 joint blocks built (>= 2; the last is "
                                                                   "pre-only)")
    parser.add_argument("--text-tokens", type=int, default=None,
                        help=f"text tokens (default per model: {TEXT_TOKENS})")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda: also the whole model, when it fits)")
    parser.add_argument("--dtype", default="float32", help="compute dtype (torch name), float32 by default")
    parser.add_argument("--loader", choices=("auto", "engine", "direct"), default="auto",
                        help="auto: load_diffusion_model when it takes DiT files, else direct")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--keep", type=Path, help="write the files here (or reuse them) and keep them")
    parser.add_argument("--in-process", action="store_true",
                        help="run every case in this process (quick check; RSS figures then not per case)")
    parser.add_argument("--tiny", action="store_true", help="the test fixtures' tiny widths (smoke test)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child_main(json.loads(args.child))))
        return []
    models = [m for m in args.models.split(",") if m]
    storages = [s for s in args.storage.split(",") if s]
    for name, allowed, given in (("--models", MODELS, models), ("--storage", STORAGES, storages)):
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise SystemExit(f"unknown {name} {unknown}; choose from {list(allowed)}")
    if "sd35" in models and args.sd35_blocks < 2:
        raise SystemExit("--sd35-blocks must be >= 2 (one joint block and the pre-only last one)")
    if args.resolution % 16:
        raise SystemExit("--resolution must be a multiple of 16 (8x VAE, 2x2 patches)")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_dit_"))
    folder.mkdir(parents=True, exist_ok=True)
    blocks = {"flux": {"double": args.flux_double, "single": args.flux_single}, "sd35": {"joint": args.sd35_blocks}}
    written: list[Path] = []
    results = []
    try:
        for model in models:
            counts = "-".join(f"{n}{k[0]}" for k, n in blocks[model].items())
            path = folder / f"{model}{'_tiny' if args.tiny else ''}_{counts}_random_bf16.safetensors"
            if not path.exists():
                started = time.perf_counter()
                nbytes = write_random_file(path, model_shapes(model, blocks[model], tiny=args.tiny))
                written.append(path)
                print(f"wrote {path.name}: {nbytes / 1e9:.2f} GB in {time.perf_counter() - started:.1f} s")
            for i, storage in enumerate(storages):
                case = {"model": model, "path": str(path), "storage": storage, "device": args.device,
                        "dtype": args.dtype, "resolution": args.resolution, "loader": args.loader,
                        "text_tokens": args.text_tokens or TEXT_TOKENS[model], "threads": args.threads,
                        "runs": args.runs if i == 0 else args.storage_runs, "tiny": args.tiny,
                        "whole": args.device.startswith("cuda")}
                result = child_main(case) if args.in_process else run_child(case)
                results.append(result)
                print("\n".join(format_case(result, args.resolution)), flush=True)
        print("\n".join(format_summary(results)))
    finally:
        if not args.keep:
            for path in written:
                path.unlink(missing_ok=True)
            try:
                folder.rmdir()
            except OSError:
                pass
    return results


if __name__ == "__main__":
    main()
