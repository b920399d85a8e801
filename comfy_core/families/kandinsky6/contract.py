"""Kandinsky 6's release constants, as ComfyUI's `comfy/ldm/kandinsky6/core_contract.py` states
them (the subset the latent nodes and the coming model code read)."""
from __future__ import annotations

VIDEO_CHANNELS = 16
VIDEO_SPATIAL_FACTOR = 8
VIDEO_TEMPORAL_FACTOR = 4
AUDIO_CHANNELS = 40
AUDIO_DOWNSAMPLE_FACTOR = 1024
AUDIO_SAMPLE_RATE = 44100
AUDIO_SCALING_FACTOR = 0.5302
PATCH_SIZE = (1, 2, 2)  # (frames, height, width) of a DiT token, in latent units

DEFAULT_WIDTH = 864
DEFAULT_HEIGHT = 480
DEFAULT_SAMPLE_FRAMES = 121
DEFAULT_FPS = 24.0
IMAGE_DIVISIBILITY = 16
