"""MultiTalk / InfiniteTalk on a Wan 2.1 MODEL: the patches WanInfiniteTalkToVideo puts on a clone
(ComfyUI's `MultiTalkGetAttnMapPatch`, `MultiTalkCrossAttnPatch`, `MultiTalkApplyModelWrapper`,
`InfiniteTalkOuterSampleWrapper` in `comfy/ldm/wan/model_multitalk.py`; behaviour read there,
written here). The network and its equations: comfy_core/families/wan/multitalk.py.

All of it is data on the MODEL's `model_options`, in ComfyUI's places:

- `transformer_options["audio_embeds"]`: the projected audio `[1, F, speakers * 32, D_a]`;
- `patches["attn2_patch"]`: `MultiTalkCrossAttnPatch`, run by every Wan block after its text
  cross-attention with `{"x", "transformer_options"}`: x + audio_scale x block i's audio residual;
- `patches["attn1_patch"]` (two speakers): `MultiTalkAttnMapPatch`, run by every Wan
  self-attention with `{"x", "q", "k", "transformer_options"}`: it leaves x as it is and puts
  the speaker attention map under `transformer_options["x_ref_attn_map"]`, which the block's
  attn2 patch takes (and removes);
- an OUTER_SAMPLE wrapper (`InfiniteTalkSampleWrapper`, key "infinite_talk_outer_sample"): for
  the run, an APPLY_MODEL wrapper that writes the motion frames' latent (model space) over the
  first latent frames of every model input, the patch network held on the model's device, and,
  when extending, the motion latent put back over the first frames of the result.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from comfy_core.families.wan.multitalk import MultiTalkError, speaker_attention_map, speaker_positions
from comfy_core.sampling.guider import process_latent_in
from comfy_core.wrappers import WrappersMP, copy_nested_dicts

AUDIO_EMBEDS = "audio_embeds"       # ComfyUI's transformer_options keys
ATTN_MAP = "x_ref_attn_map"
GRID_SIZES = "grid_sizes"
RUN_NETWORK = "multitalk_network"   # ours: the patch network held for a sampling run
OUTER_SAMPLE_KEY = "infinite_talk_outer_sample"
APPLY_MODEL_KEY = "MultiTalk_apply_model"


class MultiTalkAttnMapPatch:
    """attn1_patch: the two speakers' attention map of this block's self-attention (see
    `speaker_attention_map`), kept for the block's attn2 patch; x unchanged."""

    def __init__(self, masks: torch.Tensor) -> None:
        self.masks = masks  # [2, S] bool: each speaker's first-frame tokens

    def __call__(self, kwargs: dict) -> torch.Tensor:
        options = kwargs["transformer_options"]
        if GRID_SIZES not in options:
            raise MultiTalkError("MultiTalk: the model gave no grid_sizes (not a Wan 2.1 network?)")
        options[ATTN_MAP] = speaker_attention_map(kwargs["q"], kwargs["k"], options[GRID_SIZES], self.masks)
        return kwargs["x"]


class MultiTalkCrossAttnPatch:
    """attn2_patch: `x + audio_scale * block_i(x, audio_embeds)` (one or two speakers)."""

    def __init__(self, model_patch: Any, audio_scale: float = 1.0) -> None:
        self.model_patch = model_patch
        self.audio_scale = float(audio_scale)

    def __deepcopy__(self, memo: dict) -> "MultiTalkCrossAttnPatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the patch network)

    def __call__(self, kwargs: dict) -> torch.Tensor:
        x = kwargs["x"]
        options = kwargs["transformer_options"]
        index = options.get("block_index")
        if index is None or GRID_SIZES not in options:
            raise MultiTalkError("MultiTalk: the audio patch runs inside a Wan block (block_index and grid_sizes "
                                 "missing from transformer_options)")
        audio = options.get(AUDIO_EMBEDS)
        if audio is None:
            raise MultiTalkError("MultiTalk: transformer_options holds no audio_embeds (WanInfiniteTalkToVideo)")
        attn_map = options.pop(ATTN_MAP, None)
        positions = speaker_positions(attn_map) if attn_map is not None else None
        network = options.get(RUN_NETWORK)
        with contextlib.ExitStack() as stack:
            if network is None:
                network = stack.enter_context(self.model_patch.applied(x.device))
            if index >= len(network.blocks):
                raise MultiTalkError(f"MultiTalk: the patch has {len(network.blocks)} blocks, the model runs block "
                                     f"{index}")
            residual = network.blocks[index](x, audio.to(x.device), options[GRID_SIZES], positions, options)
        return x + residual * self.audio_scale

    def to(self, device_or_dtype: Any) -> "MultiTalkCrossAttnPatch":
        return self

    def models(self) -> list[Any]:
        """The patcher to load beside the model (ComfyUI's `model_patches_models`)."""
        return [self.model_patch]


class MultiTalkFirstFramesWrapper:
    """APPLY_MODEL wrapper: the model input's first latent frames replaced by `latent` (model space)."""

    def __init__(self, latent: torch.Tensor) -> None:
        self.latent = latent  # [1, C, n, h, w]

    def __call__(self, executor: Callable, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        n = self.latent.shape[2]
        if x.ndim != 5 or x.shape[1] != self.latent.shape[1] or x.shape[3:] != self.latent.shape[3:] or x.shape[2] < n:
            raise MultiTalkError(f"InfiniteTalk: motion latent {tuple(self.latent.shape)} does not fit the model "
                                 f"input {tuple(x.shape)}")
        x = x.clone()
        x[:, :, :n] = self.latent.to(x)
        return executor(x, *args, **kwargs)


class InfiniteTalkSampleWrapper:
    """OUTER_SAMPLE wrapper (see the module docstring): `motion_latent` `[1, 16, n, h, w]` in VAE
    space; `is_extend` when it comes from previous frames (then it replaces the result's first
    n latent frames)."""

    def __init__(self, motion_latent: torch.Tensor | None, model_patch: Any, is_extend: bool = False) -> None:
        self.motion_latent = motion_latent
        self.model_patch = model_patch
        self.is_extend = bool(is_extend)

    def __deepcopy__(self, memo: dict) -> "InfiniteTalkSampleWrapper":
        return self

    def __call__(self, executor: Callable, *args: Any, **kwargs: Any) -> torch.Tensor:
        guider = executor.class_obj
        original = guider.model_options
        run = copy_nested_dicts(original)
        transformer_options = run.setdefault("transformer_options", {})
        if self.motion_latent is not None:
            latent_format = guider.model_patcher.model.latent_format
            first = MultiTalkFirstFramesWrapper(process_latent_in(latent_format, self.motion_latent.float()))
            wrappers = transformer_options.setdefault("wrappers", {})
            wrappers.setdefault(WrappersMP.APPLY_MODEL, {})[APPLY_MODEL_KEY] = [first]
        device = getattr(guider.model_patcher, "load_device", None)
        guider.model_options = run
        try:
            with torch.no_grad(), self.model_patch.applied(device) as network:
                transformer_options[RUN_NETWORK] = network
                result = executor(*args, **kwargs)
        finally:
            guider.model_options = original
        if self.is_extend and self.motion_latent is not None:
            n = self.motion_latent.shape[2]
            result = torch.cat([self.motion_latent.to(result), result[:, :, n:]], dim=2)
        return result

    def to(self, device_or_dtype: Any) -> "InfiniteTalkSampleWrapper":
        if isinstance(device_or_dtype, torch.device) and self.motion_latent is not None:
            self.motion_latent = self.motion_latent.to(device_or_dtype)
        return self


__all__ = ["APPLY_MODEL_KEY", "ATTN_MAP", "AUDIO_EMBEDS", "InfiniteTalkSampleWrapper", "MultiTalkAttnMapPatch",
           "MultiTalkCrossAttnPatch", "MultiTalkFirstFramesWrapper", "OUTER_SAMPLE_KEY"]
