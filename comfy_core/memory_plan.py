"""VRAM modes and partial-load plans: the pure decisions behind `comfy_core.memory.MemoryManager`.

After ComfyUI 0.3.64's comfy/model_management.py (`vram_state`, `load_models_gpu`) and
comfy/model_patcher.py (`ModelPatcher.load` with `lowvram_model_memory`), written here:

- the mode comes from the device kind and the flags (`mode_from_flags`): the CPU is `disabled`,
  MPS `shared`; on a GPU `--lowvram` wins over `--novram`, both over `--highvram` / `--gpu-only`;
- how many bytes of a model's weights may live on the compute device (`weights_budget`):
  everything in the full-load modes (`gpu_only`, `highvram`, `disabled`, `shared`); in
  `normalvram` and `lowvram` everything when the model fits the room left, else the room (at least
  ComfyUI's 128 MiB floor), which is ComfyUI's automatic lowvram; nothing in `novram`;
- which modules are resident and which are streamed per forward (`plan_partial_load`): ComfyUI's
  greedy rule, largest module first, a module resident while the running total stays under the
  budget; modules that cannot be streamed (their tensors are not read inside their own forward)
  are always resident and counted first;
- the mode an out-of-memory retry falls back to (`fallback_mode`).

No torch import: module sizes come in as numbers (`comfy_core.memory_stream.module_costs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

MiB = 1024 ** 2
GiB = 1024 ** 3
# ComfyUI's floor for a partially loaded model's resident weights (load_models_gpu).
MIN_PARTIAL_WEIGHTS = 128 * MiB
# ComfyUI's minimum inference memory (0.8 GiB) and its default EXTRA_RESERVED_VRAM (400 MiB,
# replaced by --reserve-vram GB): kept free on the device for activations and other programs.
INFERENCE_RESERVE = int(0.8 * GiB)
DEFAULT_EXTRA_RESERVE = 400 * MiB


class VramMode(str, Enum):
    """How models share the compute device's memory (ComfyUI's VRAMState, plus `gpu_only`)."""

    DISABLED = "disabled"  # computing on the CPU: nothing to budget
    SHARED = "shared"  # Apple MPS: memory shared with the host
    GPU_ONLY = "gpu_only"  # everything (text encoders, VAE) lives and computes on the GPU
    HIGH = "highvram"  # models loaded whole and kept; offloaded only to make room
    NORMAL = "normalvram"  # load what fits, offload LRU, partial load when a model does not fit
    LOW = "lowvram"  # as normal; text encoders run on the CPU
    NO = "novram"  # every weight streamed per forward

    @classmethod
    def of(cls, value: "VramMode | str") -> "VramMode":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower().lstrip("-").replace("-", "_"))
        except ValueError:
            raise ValueError(f"unknown VRAM mode {value!r}; expected one of {[m.value for m in cls]}") from None

    @property
    def full_load(self) -> bool:
        """Models are always loaded whole in this mode (no partial loading)."""
        return self in (VramMode.DISABLED, VramMode.SHARED, VramMode.GPU_ONLY, VramMode.HIGH)

    @property
    def text_encoders_on_cpu(self) -> bool:
        """ComfyUI's `text_encoder_device()`: the CPU in lowvram and novram."""
        return self in (VramMode.LOW, VramMode.NO)

    @property
    def comfy_state_name(self) -> str:
        """The matching `comfy.model_management.VRAMState` member name."""
        return {VramMode.DISABLED: "DISABLED", VramMode.SHARED: "SHARED", VramMode.GPU_ONLY: "HIGH_VRAM",
                VramMode.HIGH: "HIGH_VRAM", VramMode.NORMAL: "NORMAL_VRAM", VramMode.LOW: "LOW_VRAM",
                VramMode.NO: "NO_VRAM"}[self]


def mode_from_flags(device_type: str, *, gpu_only: bool = False, highvram: bool = False, normalvram: bool = False,
                    lowvram: bool = False, novram: bool = False) -> VramMode:
    """The mode for a compute device kind and ComfyUI's VRAM flags (its precedence)."""
    if device_type == "cpu":
        return VramMode.DISABLED
    if device_type == "mps":
        return VramMode.SHARED
    if lowvram:
        return VramMode.LOW
    if novram:
        return VramMode.NO
    if gpu_only:
        return VramMode.GPU_ONLY
    if highvram:
        return VramMode.HIGH
    return VramMode.NORMAL


def reserve_bytes(reserve_vram_gb: float | None = None) -> int:
    """Device memory kept free: ComfyUI's minimum inference memory plus its extra reserve
    (`--reserve-vram GB` replaces the default 400 MiB, as EXTRA_RESERVED_VRAM)."""
    extra = DEFAULT_EXTRA_RESERVE if reserve_vram_gb is None else int(reserve_vram_gb * GiB)
    return INFERENCE_RESERVE + max(0, extra)


def weights_budget(mode: VramMode, model_bytes: int, room: int | None, *,
                   floor: int = MIN_PARTIAL_WEIGHTS) -> int | None:
    """Bytes of this model's weights allowed on the compute device, or None: load it whole.

    `room`: bytes free for it after offloading what can be offloaded (None: unlimited)."""
    if mode.full_load:
        return None
    if mode == VramMode.NO:
        return 0
    if room is None or model_bytes <= room:
        return None
    budget = max(floor, room)
    return None if model_bytes <= budget else budget


@dataclass(frozen=True)
class ModuleCost:
    """One module's own tensors (not its children's): name, bytes, and whether it can be
    streamed (its weights are read only inside its own forward: Linear, Conv, norms, ...)."""

    name: str
    nbytes: int
    streamable: bool = True


@dataclass(frozen=True)
class LoadPlan:
    """Which modules live on the compute device and which are streamed per forward."""

    resident: tuple[str, ...]
    streamed: tuple[str, ...]
    resident_bytes: int
    streamed_bytes: int
    budget: int | None  # the weights budget it was made for; None: a full load

    @property
    def full(self) -> bool:
        return not self.streamed

    @property
    def total_bytes(self) -> int:
        return self.resident_bytes + self.streamed_bytes


def plan_partial_load(modules: Iterable[ModuleCost], budget: int | None) -> LoadPlan:
    """The resident / streamed split of `modules` under a weights `budget` (None: all resident).

    ComfyUI's rule (comfy/model_patcher.py `load`): modules by size, largest first (ties by name),
    each resident while the running total plus its size stays under the budget, else streamed; a
    smaller module later may still fit. Non-streamable modules are resident whatever the budget
    and are counted before the others."""
    items = list(modules)
    if budget is None:
        return LoadPlan(tuple(m.name for m in items), (), sum(m.nbytes for m in items), 0, None)
    forced = [m for m in items if not m.streamable]
    used = sum(m.nbytes for m in forced)
    resident = [m.name for m in forced]
    streamed: list[str] = []
    streamed_bytes = 0
    for m in sorted((m for m in items if m.streamable), key=lambda m: (-m.nbytes, m.name)):
        if used + m.nbytes < budget:
            used += m.nbytes
            resident.append(m.name)
        else:
            streamed.append(m.name)
            streamed_bytes += m.nbytes
    return LoadPlan(tuple(resident), tuple(streamed), used, streamed_bytes, budget)


# The out-of-memory retry ladder: highvram falls back to partial loading, partial loading to
# streaming every weight (the smallest footprint weights can have). `gpu_only` asked for nothing
# to leave the GPU, so it has no lower mode (its retry only frees cached weights).
_FALLBACK = {VramMode.GPU_ONLY: VramMode.GPU_ONLY, VramMode.HIGH: VramMode.NORMAL, VramMode.NORMAL: VramMode.NO,
             VramMode.LOW: VramMode.NO, VramMode.NO: VramMode.NO, VramMode.DISABLED: VramMode.DISABLED,
             VramMode.SHARED: VramMode.SHARED}


def fallback_mode(mode: VramMode) -> VramMode:
    """The mode to retry in after an out-of-memory error in `mode` (the same when none is lower)."""
    return _FALLBACK[mode]
