"""Fixtures of the hook tests: the tiny SD1 model and CLIP, a UNet LoRA and a CLIP LoRA over
them, prompts, and a sampler that records the guider's x0 predictions."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from comfy_core.lora import text_encoder_key_map
from tests.fixtures.loras import write_unet_lora


def clip_lora_tensors(clip, seed: int, rank: int = 2, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Kohya-named LoRA tensors over the CLIP's q/v projections (`lora_te_...`)."""
    g = torch.Generator().manual_seed(seed)
    params = dict(clip.patcher.model.named_parameters())
    tensors = {}
    for layer, key in text_encoder_key_map(clip.patcher.model).items():
        if layer.startswith("lora_te_") and key.endswith(("q_proj.weight", "v_proj.weight")):
            w = params[key]
            tensors[f"{layer}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * scale
            tensors[f"{layer}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * scale
    assert tensors
    return tensors


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt, tmp_path_factory):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    folder = tmp_path_factory.mktemp("hook_loras")
    path = write_unet_lora(folder / "unet.safetensors", model, 3,
                           targets=("to_q.weight", "to_k.weight", "proj_in.weight"), scale=0.5)
    return SimpleNamespace(model=model, clip=clip, unet_lora=load_file(str(path)),
                           clip_lora=clip_lora_tensors(clip, 4),
                           positive=clip_text_encode("a red cube", clip)[0],
                           negative=clip_text_encode("", clip)[0])


class Recorder:
    """A SAMPLER that evaluates the guider at each of `sigmas[:-1]` on one fixed x (the noise
    times the first sigma) and records the x0 predictions in model space (`outputs`) and the
    hook run of the sampling run (`hook_run`)."""

    def __init__(self) -> None:
        self.outputs: list[torch.Tensor] = []
        self.hook_run = None
        self.weights_computed: list[int] = []

    def sample(self, guider, sigmas, extra_args, callback, noise, latent, mask, disable_pbar):
        x = noise * sigmas[0]
        with torch.no_grad():
            for sigma in sigmas[:-1]:
                self.outputs.append(guider(x, sigma * x.new_ones([x.shape[0]]), **extra_args))
                run = extra_args["model_options"].get("hook_run")
                self.hook_run = run
                self.weights_computed.append(run.weights_computed if run is not None else 0)
        return x


def record(guider, sigmas: torch.Tensor, seed: int = 0) -> Recorder:
    """The guider's predictions at each step of `sigmas` (tiny 8x8 latent)."""
    torch.manual_seed(seed)
    noise = torch.randn(1, 4, 8, 8)
    recorder = Recorder()
    guider.sample(noise, torch.zeros(1, 4, 8, 8), recorder, sigmas)
    return recorder


def predictions(model, conds: dict, sigmas: torch.Tensor, cfg: float | None = None) -> list[torch.Tensor]:
    """x0 predictions of a CFG guider (`cfg` given: positive/negative) or a basic one."""
    from comfy_core.sampling.guider import BasicGuider, CFGGuider

    if cfg is None:
        guider = BasicGuider(model)
        guider.set_conds(conds["positive"])
    else:
        guider = CFGGuider(model)
        guider.set_conds(conds["positive"], conds["negative"])
        guider.set_cfg(cfg)
    return record(guider, sigmas).outputs


@pytest.fixture
def predict():
    """`predict(model, conds, sigmas, cfg=None)`: see `predictions`."""
    return predictions


@pytest.fixture
def recorder():
    """`recorder(guider, sigmas)`: see `record`."""
    return record


@pytest.fixture(scope="module")
def sigmas(sd1):
    """A 4-step normal schedule of the tiny model (5 sigmas)."""
    from comfy_core.sampling.ksampler import ksampler_sigmas

    return ksampler_sigmas(sd1.model.model_sampling, 4, "euler", "normal")
