"""MiniMax H3's model sampling (ComfyUI's `comfy/model_sampling.py: ModelSamplingAV` + CONST):
rectified flow with SD3's time shift on the video schedule (shift 12, timestep sigma x 1000) plus
the audio stream's own shift (3). The sampler runs one schedule; the audio part of the packed
latent is carried scaled by `audio_scale` = shift / audio_shift (the model's latent in / out:
`conditions.MiniMaxH3Conditions.packed_part_scales`), which the network undoes per step."""
from __future__ import annotations

from comfy_core.models.model_sampling import FlowModelSampling


class AVFlowModelSampling(FlowModelSampling):
    """`FlowModelSampling` with `audio_shift` (None: no audio schedule, `audio_scale` 1)."""

    def __init__(self, shift: float = 1.0, audio_shift: float | None = None, multiplier: float = 1000,
                 timesteps: int = 1000) -> None:
        super().__init__(shift=shift, multiplier=multiplier, timesteps=timesteps)
        self.audio_shift = audio_shift

    @property
    def audio_scale(self) -> float:
        """The factor the sampler carries the audio stream at (video shift / audio shift)."""
        return 1.0 if self.audio_shift is None else float(self.shift) / float(self.audio_shift)

    def cache_signature(self) -> tuple:
        return super().cache_signature() + (self.audio_shift,)

    def __repr__(self) -> str:
        return f"AVFlowModelSampling(shift={self.shift}, audio_shift={self.audio_shift}, multiplier={self.multiplier})"
