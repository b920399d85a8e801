"""What the fixture-pack tests share: importing one pack of tests/compat/api_packs as a module
(the way a host imports a pack, under a test-only module name), the tiny SD1 model, and a
constant conditioning for it."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

API_PACKS = Path(__file__).resolve().parent / "api_packs"


def import_api_pack(name: str) -> Iterator[ModuleType]:
    """Import `api_packs/<name>` as `<name>_fixture` (its `EVENTS` list cleared, when it keeps
    one), yield it, and drop it from `sys.modules` after: for a pytest fixture to `yield from`."""
    spec = importlib.util.spec_from_file_location(f"{name}_fixture", API_PACKS / name / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        if hasattr(module, "EVENTS"):
            module.EVENTS.clear()
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def load_sd1_model(checkpoint: Path) -> Any:
    """The MODEL of the tiny SD1 checkpoint, without its CLIP and VAE."""
    from comfy_core.loading import load_checkpoint

    model, _, _ = load_checkpoint(checkpoint, output_clip=False, output_vae=False)
    return model


def constant_cond(model: Any, value: float) -> list:
    """A CONDITIONING of 77 tokens all equal to `value`, as wide as the model's context."""
    import torch

    ctx = model.model.diffusion_model.config.context_dim
    return [[torch.full((1, 77, ctx), value), {}]]


def unet_output(patcher: Any, seed: int = 3) -> Any:
    """The tiny SD1 UNet's output for a seeded latent and context, with the patcher's transformer
    options (what the sampler passes), inside its patches."""
    import torch

    unet = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    ctx = torch.randn(1, 3, unet.config.context_dim, generator=gen)
    options = patcher.model_options.get("transformer_options", {})
    with torch.no_grad(), patcher.applied():
        return unet(x, torch.tensor([400.0]), ctx, transformer_options=dict(options))
