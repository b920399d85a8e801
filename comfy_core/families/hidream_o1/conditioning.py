"""HiDream-O1's model inputs from a prompt's token ids and the target size (ComfyUI's
`comfy/ldm/hidream_o1/conditioning.py` / `utils.py` and `model_base.HiDreamO1.extra_conds`,
behaviour read there, code written here).

The text encoder only tokenizes (`clip.py`); here the ids become the sequence the network runs:

- text to image: `[ids, <|vision_start|>, <|image_pad|> x (n - 1)]` for the n = (H/32)(W/32) image
  patches; positions (Qwen3-VL's three-axis rule with HiDream's fixed point): text token i at
  (i, i, i), image patch (r, c) at (4096, 4096 + r, 4096 + c); `ar_len` = the text length - 1 (the
  tms token and everything after it attend the whole sequence);
- with K reference images (HiDreamO1ReferenceImages: `reference_latents`, IMAGE tensors): each is
  resized to fit `ref_max_size(max(H, W), K)`^2 pixels (32-aligned, centre-cropped) and enters twice:
  as 32x32 RGB patches after the target's (in -1..1), and through the vision tower at
  `cond_image_size(K)`^2 pixels (Lanczos), its merged tokens spliced into the ids as
  `<|vision_start|> <|image_pad|> x m <|vision_end|>` after the `<|im_start|>user\\n` prefix.
  Positions follow `position_ids` below (the ViT blocks as Qwen3-VL images, the target at the fixed
  point, the reference patches after it).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from comfy_core.families.hidream_o1.dit import IMAGE_TOKEN_ID
from comfy_core.models.model_conditions import ModelConditions

VISION_START_ID = 151652
VISION_END_ID = 151653
PATCH = 32
FIX_POINT = 4096
CONDITION_IMAGE_SIZE = 384  # the vision tower's base size for reference images
VIT_PATCH, VIT_MERGE, VIT_FRAMES = 16, 2, 2
VIT_MEAN = VIT_STD = 0.5
USER_PREFIX = 3  # <|im_start|> user \n


def ref_max_size(target_max_dim: int, count: int) -> int:
    """The side whose square the reference images' patch path fits, by their count."""
    if count == 1:
        return target_max_dim
    if count == 2:
        return target_max_dim * 48 // 64
    if count <= 4:
        return target_max_dim // 2
    if count <= 8:
        return target_max_dim * 24 // 64
    return target_max_dim // 4


def cond_image_size(count: int) -> int:
    """The side whose square the reference images' vision-tower path fits, by their count."""
    if count <= 4:
        return CONDITION_IMAGE_SIZE
    if count <= 8:
        return CONDITION_IMAGE_SIZE * 48 // 64
    return CONDITION_IMAGE_SIZE // 2


def calculate_dimensions(max_size: int, ratio: float) -> tuple[int, int]:
    """(width, height) of aspect `ratio` with about max_size^2 pixels, both floored to 32."""
    width = math.sqrt(max_size * max_size * ratio)
    height = width / ratio
    return int(width / 32) * 32, int(height / 32) * 32


def fit_image(image: torch.Tensor, size: int, multiple: int = PATCH) -> torch.Tensor:
    """[1, 3, H, W] in 0..1 -> the largest multiple-aligned size within size^2 pixels keeping the
    aspect (halved by 2x2 means while twice the size, aspect capped at 16:1 by a centre crop),
    bicubic, centre-cropped."""
    while min(image.shape[-2:]) >= 2 * size:
        image = F.avg_pool2d(image, kernel_size=2, stride=2)
    height, width = image.shape[-2:]
    if width > 16 * height:
        left = (width - 16 * height) // 2
        image = image[..., left:left + 16 * height]
    elif height > 16 * width:
        top = (height - 16 * width) // 2
        image = image[..., top:top + 16 * width, :]
    height, width = image.shape[-2:]
    area = size * size
    scale = math.sqrt(area / (width * height))
    rw, rh, fw, fh = round(width * scale), round(height * scale), math.floor(width * scale), \
        math.floor(height * scale)
    candidates = [(a // multiple * multiple, b // multiple * multiple)
                  for a, b in ((rw, rh), (rw, fh), (fw, rh), (fw, fh))]
    candidates = sorted(((max(a, multiple), max(b, multiple)) for a, b in candidates), key=lambda c: c[0] * c[1],
                        reverse=True)
    new_w, new_h = next((c for c in candidates if c[0] * c[1] <= area), candidates[-1])
    s1, s2 = width / new_w, height / new_h
    if s1 < s2:
        resize_w, resize_h = new_w, round(height / s1)
    else:
        resize_w, resize_h = round(width / s2), new_h
    image = F.interpolate(image, size=(resize_h, resize_w), mode="bicubic")
    top, left = (resize_h - new_h) // 2, (resize_w - new_w) // 2
    return image[..., top:top + new_h, left:left + new_w]


def vit_patches(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[1, 3, H, W] in 0..1 (H, W multiples of 32) -> the vision tower's patches [N, 3*2*16*16]
    (normalised by mean = std = 0.5, the image as two frames, merge blocks together) and its grid
    [3] (frames, rows, columns); ComfyUI's `process_qwen2vl_images` with no pixel bounds."""
    pixels = (image[0].float() - VIT_MEAN) / VIT_STD  # [3, H, W]
    rows, cols = pixels.shape[1] // VIT_PATCH, pixels.shape[2] // VIT_PATCH
    video = pixels[None].expand(VIT_FRAMES, -1, -1, -1)
    blocks = video.reshape(VIT_FRAMES, 3, rows // VIT_MERGE, VIT_MERGE, VIT_PATCH, cols // VIT_MERGE, VIT_MERGE,
                           VIT_PATCH).permute(2, 5, 3, 6, 1, 0, 4, 7)
    patches = blocks.reshape(rows * cols, 3 * VIT_FRAMES * VIT_PATCH * VIT_PATCH)
    return patches.contiguous(), torch.tensor([1, rows, cols], dtype=torch.long)


def prepare_references(images: Sequence[torch.Tensor], height: int, width: int) -> dict[str, Any]:
    """IMAGE tensors [B, H, W, C] (the first of each batch) -> both paths' inputs at a target of
    height x width: `ref_patches` [1, N, 3*32*32], `ref_pixel_values` [P, 1536], `ref_image_grid_thw`
    [K, 3], the ViT token count of each and each one's patch grid."""
    from comfy_core.image.resize import lanczos

    count = len(images)
    max_size, cis = ref_max_size(max(height, width), count), cond_image_size(count)
    fitted = [fit_image(img[0, :, :, :3].clamp(0, 1).permute(2, 0, 1)[None].float(), max_size) for img in images]
    patches, grids = [], []
    for image in fitted:
        rows, cols = image.shape[-2] // PATCH, image.shape[-1] // PATCH
        grids.append((rows, cols))
        tokens = image[0] * 2.0 - 1.0  # [3, H, W] in -1..1
        patches.append(tokens.reshape(3, rows, PATCH, cols, PATCH).permute(1, 3, 0, 2, 4).reshape(rows * cols, -1))
    pixel_values, vit_grids, vit_tokens = [], [], []
    for image in fitted:
        h, w = image.shape[-2:]
        cond_w, cond_h = calculate_dimensions(cis, w / h)
        cond_w, cond_h = max(cond_w, VIT_PATCH * VIT_MERGE), max(cond_h, VIT_PATCH * VIT_MERGE)
        values, grid = vit_patches(lanczos(image, cond_w, cond_h))
        pixel_values.append(values)
        vit_grids.append(grid)
        vit_tokens.append(int(grid[1] // VIT_MERGE) * int(grid[2] // VIT_MERGE))
    return {"ref_patches": torch.cat(patches)[None], "ref_pixel_values": torch.cat(pixel_values),
            "ref_image_grid_thw": torch.stack(vit_grids), "vit_tokens": vit_tokens, "patch_grids": grids}


def position_ids(ids: Sequence[int], grids: Sequence[tuple[int, int, int]], skip_start: Sequence[int],
                 fix_point: int = FIX_POINT) -> torch.Tensor:
    """[3, T] three-axis positions of the sequence `ids` whose images (each a `<|vision_start|>`
    followed by `<|image_pad|>`) have `grids` (frames, rows, columns) in order, after ComfyUI's
    `get_rope_index_fix_point`: text counts on from the last position; an image with
    `skip_start` 0 (a ViT block) starts after its preceding text, one with 1 (a patch block, whose
    start token is its first patch) at the fixed point for the first such image, after the last
    position for the others."""
    ids = list(ids)
    starts = [i for i, t in enumerate(ids)
              if t == VISION_START_ID and i + 1 < len(ids) and ids[i + 1] == IMAGE_TOKEN_ID]
    if len(starts) != len(grids):
        raise ValueError(f"HiDream-O1: {len(starts)} images in the sequence for {len(grids)} grids")
    parts: list[torch.Tensor] = []
    st, fp = 0, fix_point

    def following() -> int:
        return int(parts[-1].max()) + 1 if parts else 0

    for (frames, rows, cols), skip in zip(grids, skip_start):
        end = ids.index(IMAGE_TOKEN_ID, st)
        text = max(0, end - st - skip)
        base = following()
        parts.append(torch.arange(text).view(1, -1).expand(3, -1) + base)
        t = torch.arange(frames).view(-1, 1).expand(-1, rows * cols).flatten()
        r = torch.arange(rows).view(1, -1, 1).expand(frames, -1, cols).flatten()
        c = torch.arange(cols).view(1, 1, -1).expand(frames, rows, -1).flatten()
        grid = torch.stack([t, r, c])
        if skip:
            if fp > 0:
                fp -= base
            parts.append(grid + fp + base)
            fp = 0
        else:
            parts.append(grid + text + base)
        st = end + frames * rows * cols
    if st < len(ids):
        base = following()
        parts.append(torch.arange(len(ids) - st).view(1, -1).expand(3, -1) + base)
    return torch.cat(parts, dim=1).long()


def build_inputs(text_ids: torch.Tensor, noise: torch.Tensor, references: Sequence[torch.Tensor] | None = None
                 ) -> dict[str, Any]:
    """The network's inputs for a prompt's ids [1, L] (or [L]) and the noise [B, 3, H, W]:
    `input_ids` [1, L'] (reference tokens spliced in), `position_ids` [1, 3, T], `token_types` and
    `vinput_mask` [B, T], `ar_len` (an int), and with references `ref_patches`, `ref_pixel_values`
    [1, P, D], `ref_image_grid_thw` [1, K, 3]."""
    ids = text_ids.reshape(-1).long().tolist()
    batch, (height, width) = noise.shape[0], noise.shape[-2:]
    rows, cols = height // PATCH, width // PATCH
    length = rows * cols
    out: dict[str, Any] = {}
    if references:
        refs = prepare_references(list(references), height, width)
        inserted: list[int] = []
        for count in refs["vit_tokens"]:
            inserted += [VISION_START_ID] + [IMAGE_TOKEN_ID] * count + [VISION_END_ID]
        ids = ids[:USER_PREFIX] + inserted + ids[USER_PREFIX:]
        blocks = [(length,)] + [(r * c,) for r, c in refs["patch_grids"]]
        vision = [tok for (n,) in blocks for tok in [VISION_START_ID] + [IMAGE_TOKEN_ID] * (n - 1)]
        vit_grids = [(1, int(g[1]) // VIT_MERGE, int(g[2]) // VIT_MERGE) for g in refs["ref_image_grid_thw"]]
        grids = vit_grids + [(1, rows, cols)] + [(1, r, c) for r, c in refs["patch_grids"]]
        count = len(references)
        positions = position_ids(ids + vision, grids, [0] * count + [1] + [1] * count)
        out["ref_patches"] = refs["ref_patches"].to(device=noise.device, dtype=noise.dtype)
        out["ref_pixel_values"] = refs["ref_pixel_values"].to(device=noise.device, dtype=noise.dtype)[None]
        out["ref_image_grid_thw"] = refs["ref_image_grid_thw"].to(noise.device)[None]
        total = len(ids) + length + sum(r * c for r, c in refs["patch_grids"])
    else:
        vision = [VISION_START_ID] + [IMAGE_TOKEN_ID] * (length - 1)
        positions = position_ids(ids + vision, [(1, rows, cols)], [1])
        total = len(ids) + length
    text_len = len(ids)
    ar_len = text_len - 1
    token_types = torch.zeros(batch, total, dtype=torch.long, device=noise.device)
    token_types[:, ar_len:] = 1
    vinput_mask = torch.zeros(batch, total, dtype=torch.bool, device=noise.device)
    vinput_mask[:, text_len:] = True
    out.update(input_ids=torch.tensor([ids], dtype=torch.long, device=noise.device),
               position_ids=positions.to(noise.device)[None], token_types=token_types, vinput_mask=vinput_mask,
               ar_len=ar_len)
    return out


class HiDreamO1Conditions(ModelConditions):
    """ComfyUI's `model_base.HiDreamO1.extra_conds`: the token ids the tokenizer-only text encoder
    put in the conditioning (`text_input_ids`) and the reference images
    (`reference_latents`) become the network's inputs for this noise's size (an area
    conditioning's crop when it has one)."""

    name = "hidream_o1"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        ids, noise = kwargs.get("text_input_ids"), kwargs.get("noise")
        if ids is None or noise is None:
            return {}
        area = kwargs.get("area")
        if area is not None:
            crop_h = min(noise.shape[-2] - area[2], area[0])
            crop_w = min(noise.shape[-1] - area[3], area[1])
            noise = noise.new_empty((noise.shape[0], 3, crop_h, crop_w))
        return build_inputs(ids, noise, kwargs.get("reference_latents"))


__all__ = ["HiDreamO1Conditions", "VISION_END_ID", "VISION_START_ID", "build_inputs", "calculate_dimensions",
           "cond_image_size", "fit_image", "position_ids", "prepare_references", "ref_max_size", "vit_patches"]
