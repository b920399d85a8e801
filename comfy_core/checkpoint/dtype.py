"""Which dtype and device each component is loaded in.

Defaults follow ComfyUI on the same hardware (comfy/model_management.py `unet_dtype`,
`should_use_fp16`, `should_use_bf16`, `vae_dtype`): on the CPU the UNet and VAE run in float32
and the text encoders store float16 weights (computing in float32 inside the encoder). On a GPU
the UNet takes the first of its family's inference dtypes the device runs well (ComfyUI's
`supported_inference_dtypes`: fp16 first for SD1/SD2/SDXL/SD3, bf16 first for Flux and Chroma):
fp16 from compute capability 7 (not on the Turing cards whose fp16 is broken, not on consumer
Pascal under Linux), bf16 from capability 8, float32 on older GPUs; the VAE in bfloat16 from
capability 8 (SD VAEs overflow in float16) else float32. Explicit choices (the `--force-fp16`,
`--bf16-unet`, `--fp16-vae`, `--fp32-vae`, `--fp32-text-enc` style options of the command line)
override the defaults; nothing is chosen from a global. The decisions are pure functions of
`DeviceFacts` (what the device is), so they are tested with made-up devices.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Sequence

import torch

UNET = "unet"
VAE = "vae"
TEXT = "text"
COMPONENTS = (UNET, VAE, TEXT)


class DtypePolicyError(ValueError):
    """An impossible dtype request (unknown component, non-floating dtype)."""


# ComfyUI's card lists (comfy/model_management.py should_use_fp16): consumer Pascal cards where
# fp16 is slower than fp32 on Linux, and Turing cards whose fp16 is broken (matched as written).
PASCAL_FP16_SLOW = ("1080", "1070", "titan x", "p3000", "p3200", "p4000", "p4200", "p5000", "p5200", "p6000",
                    "1060", "1050", "p40", "p100", "p6", "p4")
FP16_BROKEN = ("1660", "1650", "1630", "T500", "T550", "T600", "MX550", "MX450", "CMP 30HX", "T2000", "T1000",
               "T1200")
# A family's inference dtypes in preference order when it says nothing (ComfyUI's BASE default).
DEFAULT_INFERENCE_DTYPES = ("fp16", "bf16", "fp32")
_NAMED = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class DeviceFacts:
    """What the dtype rules need to know about a compute device (`probe` reads a real one)."""

    kind: str = "cpu"  # "cpu", "cuda" or "mps"
    capability: tuple[int, int] = (0, 0)  # CUDA compute capability
    name: str = ""  # the card's name, for ComfyUI's per-card lists
    hip: bool = False  # a ROCm build (AMD): fp16 always, bf16 except on old architectures
    bf16_supported: bool = False  # torch.cuda.is_bf16_supported()
    windows: bool = False

    @classmethod
    def probe(cls, device: torch.device | str) -> "DeviceFacts":
        device = torch.device(device)
        if device.type != "cuda" or not torch.cuda.is_available():
            return cls(kind=device.type)
        props = torch.cuda.get_device_properties(device)
        return cls(kind="cuda", capability=(props.major, props.minor), name=props.name,
                   hip=bool(getattr(torch.version, "hip", None)), bf16_supported=torch.cuda.is_bf16_supported(),
                   windows=platform.system() == "Windows")


def fp16_runs_well(facts: DeviceFacts, *, manual_cast: bool = False) -> bool:
    """ComfyUI's `should_use_fp16` for a device (model-size terms left out): never on the CPU;
    always on MPS and ROCm; on CUDA from capability 8, not below 6, consumer Pascal only on
    Windows or when casting manually, and from 7 except the cards with broken fp16."""
    if facts.kind == "cpu":
        return False
    if facts.kind == "mps" or facts.hip:
        return True
    major = facts.capability[0]
    if major >= 8:
        return True
    if major < 6:
        return False
    if any(card in facts.name.lower() for card in PASCAL_FP16_SLOW):
        return facts.windows or manual_cast
    if major < 7:
        return manual_cast
    return not any(card in facts.name for card in FP16_BROKEN)


def bf16_runs_well(facts: DeviceFacts) -> bool:
    """ComfyUI's `should_use_bf16` (performance pass): MPS and CUDA from capability 8."""
    if facts.kind == "cpu":
        return False
    if facts.kind == "mps":
        return True
    return facts.capability[0] >= 8


def _dtype(value: str | torch.dtype) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    try:
        return _NAMED[value]
    except KeyError:
        raise DtypePolicyError(f"unknown inference dtype {value!r}; expected one of {sorted(_NAMED)}") from None


def default_unet_dtype(facts: DeviceFacts, supported: Sequence[str | torch.dtype] = DEFAULT_INFERENCE_DTYPES,
                       weight_dtype: torch.dtype | None = None) -> torch.dtype:
    """ComfyUI's `unet_dtype` without flags: fp16 first when the file stores fp16 and the family
    allows it, then the first of the family's `supported` dtypes the device runs well, then a
    second pass that accepts fp16 stored and computed by manual casting (Pascal), else float32."""
    order = [_dtype(d) for d in supported]
    if weight_dtype == torch.float16 and torch.float16 in order and fp16_runs_well(facts):
        return torch.float16
    for dtype in order:
        if dtype == torch.float16 and fp16_runs_well(facts):
            return dtype
        if dtype == torch.bfloat16 and bf16_runs_well(facts):
            return dtype
    if torch.float16 in order and fp16_runs_well(facts, manual_cast=True):
        return torch.float16
    return torch.float32


def unet_compute_dtype(storage: torch.dtype, facts: DeviceFacts,
                       supported: Sequence[str | torch.dtype] = DEFAULT_INFERENCE_DTYPES) -> torch.dtype | None:
    """ComfyUI's `unet_manual_cast`: the dtype to compute in when the device should not compute
    in the storage dtype, None when it can compute in it directly."""
    if storage in (torch.float32, torch.float64):
        return None
    if storage == torch.float16 and fp16_runs_well(facts):
        return None
    if storage == torch.bfloat16 and bf16_runs_well(facts):
        return None
    order = [_dtype(d) for d in supported]
    if torch.float16 in order and fp16_runs_well(facts):
        return torch.float16
    if torch.bfloat16 in order and bf16_runs_well(facts):
        return torch.bfloat16
    return torch.float32


def default_vae_dtype(facts: DeviceFacts, working: Sequence[str | torch.dtype] = ("bf16", "fp32")) -> torch.dtype:
    """ComfyUI's `vae_dtype` for SD VAEs (working dtypes bf16, fp32): bf16 where it runs well."""
    for dtype in (_dtype(d) for d in working):
        if dtype == torch.float16 and fp16_runs_well(facts):
            return dtype
        if dtype == torch.bfloat16 and bf16_runs_well(facts):
            return dtype
    return torch.float32


@dataclass(frozen=True)
class DtypePolicy:
    """Per-component dtype overrides; None means the device default (see the module docstring)."""

    device: str = "cpu"
    unet: torch.dtype | None = None
    vae: torch.dtype | None = None
    text: torch.dtype | None = None
    device_facts: DeviceFacts | None = None  # None: probed from `device` when a default is needed

    def __post_init__(self) -> None:
        for name in COMPONENTS:
            value = getattr(self, name)
            if value is not None and not (isinstance(value, torch.dtype) and value.is_floating_point):
                raise DtypePolicyError(f"DtypePolicy.{name}: expected a floating torch.dtype or None, got {value!r}")

    @classmethod
    def from_flags(cls, device: str = "cpu", *, force_fp16: bool = False, force_fp32: bool = False,
                   bf16_unet: bool = False, fp16_unet: bool = False, fp16_vae: bool = False,
                   bf16_vae: bool = False, fp32_vae: bool = False, fp32_text_enc: bool = False,
                   fp16_text_enc: bool = False) -> "DtypePolicy":
        """The policy for ComfyUI-style command-line flags."""
        if force_fp16 and force_fp32:
            raise DtypePolicyError("--force-fp16 and --force-fp32 cannot both be set")
        unet = torch.float16 if (force_fp16 or fp16_unet) else torch.bfloat16 if bf16_unet else \
            torch.float32 if force_fp32 else None
        vae = torch.float16 if fp16_vae else torch.bfloat16 if bf16_vae else \
            torch.float32 if (fp32_vae or force_fp32) else None
        text = torch.float32 if (fp32_text_enc or force_fp32) else torch.float16 if fp16_text_enc else None
        return cls(device=device, unet=unet, vae=vae, text=text)

    def dtype_for(self, component: str, supported: Sequence[str | torch.dtype] | None = None,
                  weight_dtype: torch.dtype | None = None) -> torch.dtype:
        """The dtype of `component`: the explicit choice, else the device default (see the
        module docstring). `supported`: the family's inference dtypes in preference order
        (`Family.inference_dtypes`; default fp16, bf16, fp32); `weight_dtype`: how the file
        stores the UNet (fp16 files stay fp16 where the family allows it)."""
        if component not in COMPONENTS:
            raise DtypePolicyError(f"unknown component {component!r}; expected one of {COMPONENTS}")
        chosen = getattr(self, component)
        if chosen is not None:
            return chosen
        if component == TEXT:
            return torch.float16
        if torch.device(self.device).type == "cpu":
            return torch.float32
        facts = self.facts()
        if component == UNET:
            return default_unet_dtype(facts, supported or DEFAULT_INFERENCE_DTYPES, weight_dtype)
        return default_vae_dtype(facts)

    def facts(self) -> DeviceFacts:
        """The device facts the defaults are chosen from (`device_facts`, else probed)."""
        return self.device_facts if self.device_facts is not None else DeviceFacts.probe(self.device)
