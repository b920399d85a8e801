"""SAM 3 / 3.1 sizes read from a file's tensor names and shapes (header only), and the marker
keys that say a file is SAM 3 (ComfyUI detects it by `detector.*` / `tracker.*` names: its
`comfy/model_detection.py`; SAM 3.1 "multiplex" by the tracker's propagation neck)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DETECTOR = "detector."
TRACKER = "tracker."
MARKER = "detector.backbone.vision_backbone.trunk.blocks.0.attn.qkv.weight"
QUERY_MARKER = "detector.transformer.decoder.query_embed.weight"
VIDEO_MARKERS = ("tracker.maskmem_tpos_enc", "tracker.transformer.encoder.layers.0.linear1.weight",
                 "tracker.maskmem_backbone.mask_downsampler.encoder.0.weight",
                 "tracker.sam_mask_decoder.mask_tokens.weight", "tracker.output_valid_embed")
MULTIPLEX_MARKER = "detector.backbone.vision_backbone.propagation_convs.0.conv_1x1.weight"
IMAGE_SIZE = 1008  # ComfyUI resizes every frame to 1008 x 1008


class Sam3ConfigError(ValueError):
    """A SAM 3 file whose tensors do not describe a network this engine builds."""


def is_sam3(names: Any) -> bool:
    """Whether a file's tensor names are a SAM 3 / 3.1 checkpoint's."""
    return MARKER in names and QUERY_MARKER in names


def _count(names: Any, prefix: str) -> int:
    n = 0
    while f"{prefix}{n}." in _prefixes(names, prefix):
        n += 1
    return n


def _prefixes(names: Any, prefix: str) -> set[str]:
    out = set()
    for name in names:
        if name.startswith(prefix):
            rest = name[len(prefix):]
            out.add(prefix + rest.split(".", 1)[0] + ".")
    return out


@dataclass(frozen=True)
class Sam3Config:
    multiplex: bool
    vit_dim: int
    vit_depth: int
    vit_heads: int
    vit_mlp: int
    patch: int
    pretrain_grid: int
    window: int
    global_blocks: tuple[int, ...]
    d_model: int
    queries: int
    enc_layers: int
    dec_layers: int
    ffn: int
    geo_layers: int
    geo_ffn: int
    roi_size: int
    scoring_ffn: int
    sam_ffn: int
    sam_depth: int
    image_size: int = IMAGE_SIZE
    # the video tracker (SAM 3.1's multiplex one): built only when the file carries it
    video: bool = False
    multiplex_count: int = 16  # objects per decoder / memory-encoder pass
    num_maskmem: int = 7  # memory frames (temporal embeddings)
    mem_dim: int = 256
    mem_layers: int = 4
    mem_ffn: int = 2048
    mask_channels: tuple[int, ...] = (16, 64, 256, 1024)
    fuser_layers: int = 2

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Sam3Config":
        """`tensors`: name -> an object with `.shape` (or a shape tuple)."""

        def shape(name: str) -> tuple[int, ...]:
            value = tensors.get(prefix + name)
            if value is None:
                raise Sam3ConfigError(f"SAM 3 file without {prefix + name}")
            return tuple(int(s) for s in getattr(value, "shape", value))

        names = [n[len(prefix):] for n in tensors if n.startswith(prefix)]
        trunk = "detector.backbone.vision_backbone.trunk."
        dim = shape(trunk + "blocks.0.attn.qkv.weight")[1]
        depth = _count(names, trunk + "blocks.")
        patch = shape(trunk + "patch_embed.proj.weight")[-1]
        pretrain = shape(trunk + "pos_embed")[1] - 1
        grid = int(round(pretrain ** 0.5))
        quarter = depth // 4
        global_blocks = tuple(i for i in range(depth) if quarter and (i + 1) % quarter == 0) or (depth - 1,)
        d_model = shape("detector.transformer.decoder.query_embed.weight")[1]
        tr = "tracker."
        decoder = "interactive_sam_mask_decoder." if any(n.startswith(tr + "interactive_sam_mask_decoder.")
                                                         for n in names) else "sam_mask_decoder."
        video = _video_sizes(names, shape) if "tracker.maskmem_tpos_enc" in names else {}
        return cls(
            **video,
            multiplex=any(n.startswith("detector.backbone.vision_backbone.propagation_convs.") for n in names),
            vit_dim=dim, vit_depth=depth, vit_heads=16 if dim % 16 == 0 and (dim // 16) % 4 == 0 else 1,
            vit_mlp=shape(trunk + "blocks.0.mlp.fc1.weight")[0], patch=patch, pretrain_grid=grid,
            window=24, global_blocks=global_blocks, d_model=d_model,
            queries=shape("detector.transformer.decoder.query_embed.weight")[0],
            enc_layers=_count(names, "detector.transformer.encoder.layers."),
            dec_layers=_count(names, "detector.transformer.decoder.layers."),
            ffn=shape("detector.transformer.encoder.layers.0.linear1.weight")[0],
            geo_layers=_count(names, "detector.geometry_encoder.encode."),
            geo_ffn=shape("detector.geometry_encoder.encode.0.linear1.weight")[0],
            roi_size=shape("detector.geometry_encoder.boxes_pool_project.weight")[-1],
            scoring_ffn=shape("detector.dot_prod_scoring.prompt_mlp.layers.0.weight")[0],
            sam_ffn=shape(f"{tr}{decoder}transformer.layers.0.mlp.0.weight")[0],
            sam_depth=_count(names, f"{tr}{decoder}transformer.layers."),
        )


def _video_sizes(names: list[str], shape: Any) -> dict[str, Any]:
    """The multiplex video tracker's sizes, or {} (no video tracker) when its tensors are not all
    there (a file cut down for detection still loads)."""
    present = set(names)
    multiplex = any(n.startswith("detector.backbone.vision_backbone.propagation_convs.") for n in names)
    if not multiplex or not all(m in present for m in VIDEO_MARKERS):
        return {}
    tpos = shape("tracker.maskmem_tpos_enc")
    down = "tracker.maskmem_backbone.mask_downsampler.encoder."
    channels = []
    while f"{down}{3 * len(channels) + 1}.weight" in present:
        channels.append(shape(f"{down}{3 * len(channels)}.weight")[0])
    return {"video": True, "multiplex_count": shape("tracker.output_valid_embed")[0], "num_maskmem": tpos[0],
            "mem_dim": tpos[-1], "mem_layers": _count(names, "tracker.transformer.encoder.layers."),
            "mem_ffn": shape("tracker.transformer.encoder.layers.0.linear1.weight")[0],
            "mask_channels": tuple(channels), "fuser_layers": _count(names, "tracker.maskmem_backbone.fuser.layers.")}
