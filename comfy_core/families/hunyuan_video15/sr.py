"""HunyuanVideo 1.5's distilled 1080p super-resolution model (`hunyuanvideo1.5_1080p_sr_distilled`):
the same network with 98 input channels (the SR conditioning block, conditions.py) and a MeanFlow
`time_r_in`; shift 2 (ComfyUI's `HunyuanVideo15_SR_Distilled`)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.hunyuan_video15 import hunyuan_video15_family


def definition() -> Family:
    return hunyuan_video15_family("hunyuan_video15_sr", "HunyuanVideo 1.5 super-resolution", super_resolution=True)
