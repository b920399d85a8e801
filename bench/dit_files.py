"""The full-width DiT files bench/dit_blocks.py measures: Flux.1-dev and SD3.5-large layouts with
any number of blocks, random bf16 weights written as `.safetensors`, and loading them in a storage
dtype (through the engine's `load_diffusion_model`, or directly: built on the meta device from the
header, tensors assigned).

The names and shapes come from tests/fixtures/{flux,mmdit}_files.py, which write the BFL / SAI
layouts out independently of `comfy_core`'s modules, so a strict load checks the modules' names.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

MODELS = ("flux", "sd35")
STORAGES = ("fp32", "bf16", "fp16", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2")


def flux_arch(double: int, single: int, *, tiny: bool = False) -> dict[str, Any]:
    """ComfyUI's `FluxParams` of Flux.1-dev at full width (tiny: the test fixture's widths)."""
    from tests.fixtures.flux_files import tiny_flux_params

    if tiny:
        return tiny_flux_params(guidance=True, depth=double, depth_single=single)
    return tiny_flux_params(guidance=True, hidden=3072, heads=24, depth=double, depth_single=single,
                            in_channels=16, out_channels=16, context_in_dim=4096, vec_in_dim=768)


def model_shapes(model: str, blocks: Mapping[str, int], *, tiny: bool = False) -> dict[str, tuple[int, ...]]:
    """`{name: shape}` of the diffusion model in its real layout (BFL / SAI names, no prefix).

    `blocks`: Flux `{"double": n, "single": m}`; SD3.5 `{"joint": n}` (the last one pre-only)."""
    if model == "flux":
        from tests.fixtures.flux_files import _shapes

        return _shapes(flux_arch(blocks["double"], blocks["single"], tiny=tiny))
    if model == "sd35":
        from tests.fixtures.mmdit_files import mmdit_shapes

        if tiny:
            return mmdit_shapes("sd35", blocks=blocks["joint"])
        return mmdit_shapes("sd35", depth=38, blocks=blocks["joint"], in_channels=16, patch=2, context=4096,
                            pooled=2048, table=192)
    raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")


def random_tensor(name: str, shape: tuple[int, ...], generator: Any, dtype: Any, device: Any = "cpu") -> Any:
    """A random weight that keeps activations O(1): fan-in scaled normal matrices, norm scales
    near one, small biases, a unit-scale position table."""
    import torch

    if name.endswith((".scale", ".ln_q.weight", ".ln_k.weight")):
        value = 1.0 + 0.1 * torch.randn(shape, generator=generator, device=device)
    elif name == "pos_embed":
        value = 0.5 * torch.randn(shape, generator=generator, device=device)
    elif len(shape) < 2:
        value = 0.02 * torch.randn(shape, generator=generator, device=device)
    else:
        value = torch.randn(shape, generator=generator, device=device) / math.sqrt(math.prod(shape[1:]))
    return value.to(dtype)


def write_random_file(path: Path, shapes: Mapping[str, tuple[int, ...]], seed: int = 0) -> int:
    """Random bf16 weights of `shapes` (as the released Flux / SD3.5 files store them) written to
    `path`; returns the tensor bytes."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    tensors = {name: random_tensor(name, tuple(shape), generator, torch.bfloat16) for name, shape in shapes.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def storage_dtype(storage: str) -> Any:
    import torch

    names = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
             "fp8_e4m3fn": torch.float8_e4m3fn, "fp8_e4m3fn_fast": torch.float8_e4m3fn,
             "fp8_e5m2": torch.float8_e5m2}
    if storage not in names:
        raise ValueError(f"unknown storage {storage!r}; expected one of {STORAGES}")
    return names[storage]


def build_from_header(model: str, path: Path) -> Any:
    """`Flux` / `MMDiT` built on the meta device from the file's header (names and shapes only)."""
    from comfy_core.checkpoint.header import read_safetensors_header

    return build_from_shapes(model, read_safetensors_header(path).tensors)


def build_from_shapes(model: str, tensors: Mapping[str, Any]) -> Any:
    """`Flux` / `MMDiT` on the meta device, its config detected from `tensors` (name -> `.shape`)."""
    import torch

    with torch.device("meta"):
        if model == "flux":
            from comfy_core.families.flux.dit import FluxConfig, FluxTransformer as Flux

            return Flux.from_config(FluxConfig.detect_from_weights(tensors, ""))
        from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig

        return MMDiT.from_config(MMDiTConfig.detect_from_weights(tensors, ""))


def load_direct(model: str, path: Path, storage: Any, device: Any) -> Any:
    """The module built from the header and the file's tensors assigned in `storage` (read one
    tensor at a time, so the load never holds the file twice)."""
    from safetensors import safe_open

    module = build_from_header(model, path)
    state = {}
    with safe_open(str(path), framework="pt") as file:
        for name in file.keys():
            state[name] = file.get_tensor(name).to(device=device, dtype=storage)
    module.load_state_dict(state, strict=True, assign=True)
    return module.eval()


def load_with_engine(path: Path, storage: str, device: Any) -> tuple[Any | None, str]:
    """`(module, how)` by `load_diffusion_model` (the path a real file takes), or `(None, why
    not)` when that loader cannot be imported or refuses the file (a checkout mid-refactor)."""
    from comfy_core.checkpoint.errors import CheckpointError

    try:
        from comfy_core.split.diffusion_model import load_diffusion_model
    except ImportError as exc:
        return None, f"load_diffusion_model not importable: {exc}"
    try:
        patcher = load_diffusion_model(path, weight_dtype=storage_dtype(storage),
                                       fp8_optimizations=storage == "fp8_e4m3fn_fast")
    except CheckpointError as exc:
        return None, f"load_diffusion_model refused the file: {str(exc).splitlines()[0][:120]}"
    return patcher.model.diffusion_model.to(device).eval(), "engine (load_diffusion_model)"


def load_module(model: str, path: Path, storage: str, device: Any, compute: Any, loader: str) -> tuple[Any, str]:
    """`(module, how it was loaded)`, its layers casting weights to the input's dtype at run time
    when the storage dtype is not the compute dtype. `loader`: "engine" (or fail), "direct", or
    "auto" (engine, else direct, saying why)."""
    from comfy_core.models.storage_cast import cast_weights_at_run_time

    dtype = storage_dtype(storage)
    module, how = None, "direct (safetensors + load_state_dict(assign=True))"
    if loader in ("auto", "engine"):
        module, reason = load_with_engine(path, storage, device)
        if module is None and loader == "engine":
            raise RuntimeError(reason)
        how = reason if module is not None else f"direct ({reason})"
    if module is None:
        module = load_direct(model, path, dtype, device)
    if dtype != compute:
        cast_weights_at_run_time(module, fp8_matrix_mult=storage == "fp8_e4m3fn_fast")
    return module, how


def module_bytes(module: Any) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())
