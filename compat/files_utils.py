"""The rest of ComfyUI's `comfy/utils.py` for packs: state-dict helpers, attribute paths, batch
resizing, the diffusers UNet name tables, progress-bar switches (ComfyUI 0.3.64's behaviour,
written here). File reading and image resizing live in compat/tensors.py, the tiling in
comfy_core/upscale/tiling.py, `ProgressBar` in compat/progress.py.

The name tables are module globals that `unet_to_diffusers` reads when called, so a pack that
edits them (`comfy.utils.UNET_MAP_BASIC.add(...)`, Easy-Use's Kolors loader) or assigns them
(the facade forwards `comfy.utils.UNET_MAP_BASIC = x` here) changes what it returns, as there.
torch is imported inside the functions: packs import `comfy.utils` at start-up.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, MutableMapping, Sequence

from comfy_core.checkpoint.diffusers_keys import UNET_RESNET_PARTS, UNET_TOP

if TYPE_CHECKING:
    import torch

# ComfyUI's --mmap-torch-files / --disable-mmap defaults; torch files are always read with
# weights_only=True here, so ALWAYS_SAFE_LOAD only records the request.
MMAP_TORCH_FILES = False
DISABLE_MMAP = False
ALWAYS_SAFE_LOAD = False

PROGRESS_BAR_ENABLED = True
# A function(value, total, preview, node_id=...) that, when set, receives every ProgressBar
# update instead of the running node (ComfyUI's global hook; compat/progress.py reads it).
PROGRESS_BAR_HOOK: Callable[..., Any] | None = None


def set_progress_bar_enabled(enabled: bool) -> None:
    """ComfyUI's switch for console progress bars; `PROGRESS_BAR_ENABLED` reads it back."""
    global PROGRESS_BAR_ENABLED
    PROGRESS_BAR_ENABLED = bool(enabled)


def set_progress_bar_global_hook(function: Callable[..., Any] | None) -> None:
    """Route every `ProgressBar` update to `function(value, total, preview, node_id=...)`
    (None: back to the running node's progress)."""
    global PROGRESS_BAR_HOOK
    PROGRESS_BAR_HOOK = function


def model_trange(*args: Any, **kwargs: Any) -> Any:
    """ComfyUI's `comfy.utils.model_trange` (today's comfy/utils.py), the step loop of ComfyUI's
    k-diffusion samplers and of many pack samplers (`for i in model_trange(len(sigmas) - 1,
    disable=disable)`): tqdm's `trange(*args, **kwargs)`. ComfyUI adds a "Model Initializing"
    warm-up display only with dynamic VRAM (`comfy.memory_management.aimdo_enabled`), which is
    never on here."""
    from tqdm.auto import trange

    return trange(*args, **kwargs)


# --- weight files and state dicts ---

def save_torch_file(sd: Mapping[str, torch.Tensor], ckpt: str | Path, metadata: Mapping[str, str] | None = None) -> None:
    """Write `sd` as a safetensors file (with string `metadata`), as ComfyUI's."""
    from safetensors.torch import save_file

    tensors = {k: v.contiguous() for k, v in sd.items()}
    save_file(tensors, str(ckpt), metadata=dict(metadata) if metadata is not None else None)


def calculate_parameters(sd: Mapping[str, torch.Tensor], prefix: str = "") -> int:
    """Number of elements of the tensors whose key starts with `prefix`."""
    return sum(v.nelement() for k, v in sd.items() if k.startswith(prefix))


def weight_dtype(sd: Mapping[str, torch.Tensor], prefix: str = "") -> torch.dtype | None:
    """The dtype holding the most elements among the tensors under `prefix` (None if none)."""
    counts: dict[Any, int] = {}
    for key, tensor in sd.items():
        if key.startswith(prefix):
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.numel()
    return max(counts, key=counts.__getitem__) if counts else None


def state_dict_key_replace(state_dict: MutableMapping[str, Any], keys_to_replace: Mapping[str, str]) -> MutableMapping:
    """Rename keys in place (`{old: new}`); returns `state_dict`."""
    for old, new in keys_to_replace.items():
        if old in state_dict:
            state_dict[new] = state_dict.pop(old)
    return state_dict


def state_dict_prefix_replace(state_dict: MutableMapping[str, Any], replace_prefix: Mapping[str, str],
                              filter_keys: bool = False) -> MutableMapping:
    """Replace key prefixes (`{old prefix: new prefix}`). In place, or, with `filter_keys`, into
    a new dict holding only the renamed keys (they are still popped from `state_dict`)."""
    out: MutableMapping[str, Any] = {} if filter_keys else state_dict
    for old, new in replace_prefix.items():
        for key in [k for k in state_dict if k.startswith(old)]:
            out[new + key[len(old):]] = state_dict.pop(key)
    return out


def convert_sd_to(state_dict: MutableMapping[str, torch.Tensor], dtype: torch.dtype) -> MutableMapping:
    """Every tensor cast to `dtype`, in place; returns `state_dict`."""
    for key in list(state_dict):
        state_dict[key] = state_dict[key].to(dtype)
    return state_dict


def safetensors_header(safetensors_path: str | Path, max_size: int = 100 * 1024 * 1024) -> bytes | None:
    """The raw JSON header bytes of a safetensors file, or None when it claims more than `max_size`."""
    with open(safetensors_path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > max_size:
            return None
        return f.read(length)


# OpenCLIP text-tower names -> transformers' CLIPTextModel names.
_OPEN_CLIP_TOP = (("positional_embedding", "embeddings.position_embedding.weight"),
                  ("token_embedding.weight", "embeddings.token_embedding.weight"),
                  ("ln_final.weight", "final_layer_norm.weight"), ("ln_final.bias", "final_layer_norm.bias"))
_OPEN_CLIP_BLOCK = (("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"), ("mlp.c_fc", "mlp.fc1"),
                    ("mlp.c_proj", "mlp.fc2"), ("attn.out_proj", "self_attn.out_proj"))


def transformers_convert(sd: MutableMapping[str, torch.Tensor], prefix_from: str, prefix_to: str,
                         number: int) -> MutableMapping:
    """OpenCLIP text-tower keys under `prefix_from` renamed in place to transformers' under
    `prefix_to`, for `number` residual blocks; fused `in_proj` weights split into q, k, v."""
    for old, new in _OPEN_CLIP_TOP:
        if prefix_from + old in sd:
            sd[prefix_to + new] = sd.pop(prefix_from + old)
    for block in range(number):
        source = f"{prefix_from}transformer.resblocks.{block}."
        target = f"{prefix_to}encoder.layers.{block}."
        for old, new in _OPEN_CLIP_BLOCK:
            for kind in ("weight", "bias"):
                if f"{source}{old}.{kind}" in sd:
                    sd[f"{target}{new}.{kind}"] = sd.pop(f"{source}{old}.{kind}")
        for kind in ("weight", "bias"):
            fused = f"{source}attn.in_proj_{kind}"
            if fused in sd:
                q, k, v = sd.pop(fused).chunk(3, dim=0)  # [3W, ...] -> three [W, ...]
                for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                    sd[f"{target}self_attn.{name}.{kind}"] = part
    return sd


def clip_text_transformers_convert(sd: MutableMapping[str, torch.Tensor], prefix_from: str,
                                   prefix_to: str) -> MutableMapping:
    """A whole OpenCLIP text tower (up to 32 blocks) to transformers' `text_model.` names, with
    its projection as `text_projection.weight` (a bare `text_projection` matrix is transposed)."""
    transformers_convert(sd, prefix_from, f"{prefix_to}text_model.", 32)
    if f"{prefix_from}text_projection.weight" in sd:
        sd[f"{prefix_to}text_projection.weight"] = sd.pop(f"{prefix_from}text_projection.weight")
    if f"{prefix_from}text_projection" in sd:
        sd[f"{prefix_to}text_projection.weight"] = sd.pop(f"{prefix_from}text_projection").transpose(0, 1).contiguous()
    return sd


# --- diffusers UNet name tables (built from comfy_core/checkpoint/diffusers_keys.py's parts) ---

_KINDS = ("weight", "bias")
UNET_MAP_ATTENTIONS: set[str] = {f"{m}.{k}" for m in ("proj_in", "proj_out", "norm") for k in _KINDS}
TRANSFORMER_BLOCKS: set[str] = (
    {f"norm{i}.{k}" for i in (1, 2, 3) for k in _KINDS}
    | {f"attn{a}.to_{p}.weight" for a in (1, 2) for p in ("q", "k", "v")}
    | {f"attn{a}.to_out.0.{k}" for a in (1, 2) for k in _KINDS}
    | {f"ff.net.0.proj.{k}" for k in _KINDS} | {f"ff.net.2.{k}" for k in _KINDS})
# LDM res-block tensor -> diffusers res-block tensor.
UNET_MAP_RESNET: dict[str, str] = {f"{ldm}.{k}": f"{diff}.{k}" for diff, ldm in UNET_RESNET_PARTS for k in _KINDS}
# (LDM name, diffusers name) of the tensors outside the blocks; SD2 unCLIP-style class embeddings too.
UNET_MAP_BASIC: set[tuple[str, str]] = (
    {(f"{ldm}.{k}", f"{diff}.{k}") for diff, ldm in UNET_TOP for k in _KINDS}
    | {(f"label_emb.0.{i}.{k}", f"class_embedding.linear_{j}.{k}") for i, j in ((0, 1), (2, 2)) for k in _KINDS})


def unet_to_diffusers(unet_config: Mapping[str, Any]) -> dict[str, str]:
    """`{diffusers tensor name: LDM tensor name}` for a UNet described by ComfyUI's config keys
    (`num_res_blocks` per level, `channel_mult`, `transformer_depth` per input res block,
    `transformer_depth_output` per output block, `transformer_depth_middle`); `{}` without
    `num_res_blocks`, as ComfyUI."""
    if "num_res_blocks" not in unet_config:
        return {}
    res_blocks = list(unet_config["num_res_blocks"])
    levels = len(unet_config["channel_mult"])
    depth_in = list(unet_config["transformer_depth"])
    depth_out = list(unet_config["transformer_depth_output"])
    depth_mid = unet_config.get("transformer_depth_middle") or 0
    out: dict[str, str] = {}

    def attention(diff: str, ldm: str, depth: int) -> None:
        for name in UNET_MAP_ATTENTIONS:
            out[f"{diff}.{name}"] = f"{ldm}.{name}"
        for t in range(depth):
            for name in TRANSFORMER_BLOCKS:
                out[f"{diff}.transformer_blocks.{t}.{name}"] = f"{ldm}.transformer_blocks.{t}.{name}"

    def resnet(diff: str, ldm: str) -> None:
        for ldm_name, diff_name in UNET_MAP_RESNET.items():
            out[f"{diff}.{diff_name}"] = f"{ldm}.{ldm_name}"

    block = 1  # input_blocks.0 is conv_in
    for level in range(levels):
        for i in range(res_blocks[level]):
            resnet(f"down_blocks.{level}.resnets.{i}", f"input_blocks.{block}.0")
            depth = depth_in.pop(0)
            if depth > 0:
                attention(f"down_blocks.{level}.attentions.{i}", f"input_blocks.{block}.1", depth)
            block += 1
        for k in _KINDS:  # ComfyUI lists a downsampler for every level, the last included
            out[f"down_blocks.{level}.downsamplers.0.conv.{k}"] = f"input_blocks.{block}.0.op.{k}"
        block += 1
    attention("mid_block.attentions.0", "middle_block.1", depth_mid)
    for i, n in enumerate((0, 2)):
        resnet(f"mid_block.resnets.{i}", f"middle_block.{n}")
    block = 0
    for level, count in enumerate(reversed(res_blocks)):
        for i in range(count + 1):
            resnet(f"up_blocks.{level}.resnets.{i}", f"output_blocks.{block}.0")
            sub = 1
            depth = depth_out.pop()
            if depth > 0:
                attention(f"up_blocks.{level}.attentions.{i}", f"output_blocks.{block}.1", depth)
                sub = 2
            if i == count:
                for k in _KINDS:
                    out[f"up_blocks.{level}.upsamplers.0.conv.{k}"] = f"output_blocks.{block}.{sub}.conv.{k}"
            block += 1
    for ldm, diff in UNET_MAP_BASIC:
        out[diff] = ldm
    return out


def swap_scale_shift(weight: torch.Tensor) -> torch.Tensor:
    """`[shift; scale]` halves swapped to `[scale; shift]` (diffusers' AdaLayerNorm order)."""
    import torch

    shift, scale = weight.chunk(2, dim=0)
    return torch.cat([scale, shift], dim=0)


# --- batches ---

def resize_to_batch_size(tensor: torch.Tensor, batch_size: int) -> torch.Tensor:
    """`tensor` resampled along the batch to `batch_size` entries by nearest index (evenly
    spread when shrinking, centred when growing), as ComfyUI's."""
    import torch

    indices = _resized_indices(tensor.shape[0], batch_size)
    if indices is None:
        return tensor if batch_size >= tensor.shape[0] else tensor[:batch_size]
    return tensor[torch.tensor(indices, dtype=torch.long, device=tensor.device)]


def resize_list_to_batch_size(l: list, batch_size: int) -> list:  # noqa: E741 - ComfyUI's parameter name
    """`resize_to_batch_size` for a list."""
    items = l
    if not items:
        return items
    indices = _resized_indices(len(items), batch_size)
    if indices is None:
        return items if batch_size >= len(items) else items[:batch_size]
    return [items[i] for i in indices]


def _resized_indices(size: int, batch_size: int) -> list[int] | None:
    """Source index of each output entry, or None when no resampling is needed (same size, or
    `batch_size <= 1`: the first entries are taken)."""
    if size == batch_size or batch_size <= 1:
        return None
    if batch_size < size:
        scale = (size - 1) / (batch_size - 1)
        return [min(round(i * scale), size - 1) for i in range(batch_size)]
    scale = size / batch_size
    return [min(math.floor((i + 0.5) * scale), size - 1) for i in range(batch_size)]


# --- attribute paths ---

def get_attr(obj: Any, attr: str) -> Any:
    """The attribute at dotted path `attr` of `obj` (`"layer1.conv.weight"`)."""
    for name in attr.split("."):
        obj = getattr(obj, name)
    return obj


def set_attr(obj: Any, attr: str, value: Any) -> Any:
    """Set the attribute at dotted path `attr` to `value`; returns the previous value."""
    head, _, last = attr.rpartition(".")
    owner = get_attr(obj, head) if head else obj
    previous = getattr(owner, last)
    setattr(owner, last, value)
    return previous


def set_attr_param(obj: Any, attr: str, value: torch.Tensor) -> Any:
    """`set_attr` with `value` wrapped as a frozen `nn.Parameter`."""
    import torch

    return set_attr(obj, attr, torch.nn.Parameter(value, requires_grad=False))


def copy_to_param(obj: Any, attr: str, value: torch.Tensor) -> None:
    """Copy `value` into the tensor at `attr` in place (the tensor object is kept)."""
    get_attr(obj, attr).data.copy_(value)


# --- masks ---

def reshape_mask(input_mask: torch.Tensor, output_shape: Sequence[int]) -> torch.Tensor:
    """A mask resized (linear / bilinear / trilinear for 1-, 2-, 3-D latents) to `output_shape`
    `[B, C, *spatial]`, its channels repeated to C and its batch to B."""
    import torch.nn.functional as F

    from compat.tensors import repeat_to_batch_size

    dims = len(output_shape) - 2
    modes = {1: "linear", 2: "bilinear", 3: "trilinear"}
    if dims not in modes:
        raise ValueError(f"reshape_mask: output shape {tuple(output_shape)} must have 1 to 3 spatial dimensions")
    mask = input_mask
    if dims == 2:
        mask = mask.reshape((-1, 1, mask.shape[-2], mask.shape[-1]))
    elif dims == 3 and mask.dim() < 5:
        mask = mask.reshape((1, 1, -1, mask.shape[-2], mask.shape[-1]))
    mask = F.interpolate(mask, size=tuple(output_shape[2:]), mode=modes[dims])
    if mask.shape[1] < output_shape[1]:
        mask = mask.repeat((1, output_shape[1]) + (1,) * dims)[:, :output_shape[1]]
    return repeat_to_batch_size(mask, output_shape[0])


def upscale_dit_mask(mask: torch.Tensor, img_size_in: Sequence[int], img_size_out: Sequence[int]) -> torch.Tensor:
    """A DiT attention mask `[b, q, k]` over text + `hi*wi` image tokens resized to `ho*wo` image
    tokens: the image axes of each quadrant are resampled bilinearly, the text ones kept."""
    import torch
    import torch.nn.functional as F

    hi, wi = img_size_in
    ho, wo = img_size_out
    if (hi, wi) == (ho, wo):
        return mask
    if mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask.ndim != 3:
        raise ValueError(f"upscale_dit_mask: got a mask of shape {list(mask.shape)}, expected [b, q, k] or [q, k]")
    b, t = mask.shape[0], mask.shape[1] - hi * wi

    def grid(x: torch.Tensor) -> torch.Tensor:  # [b, n, hi*wi] -> [b, n, ho*wo]
        n = x.shape[1]
        return F.interpolate(x.reshape(b, n, hi, wi), size=(ho, wo), mode="bilinear").reshape(b, n, ho * wo)

    txt_txt, txt_img = mask[:, :t, :t], grid(mask[:, :t, t:])
    img_txt = grid(mask[:, t:, :t].transpose(1, 2)).transpose(1, 2)  # [b, ho*wo, t]
    img_img = grid(mask[:, t:, t:])  # keys resized: [b, hi*wi, ho*wo]
    img_img = grid(img_img.transpose(1, 2)).transpose(1, 2)  # queries resized: [b, ho*wo, ho*wo]
    return torch.cat([torch.cat([txt_txt, txt_img], dim=2), torch.cat([img_txt, img_img], dim=2)], dim=1)


def convert_old_quants(state_dict: MutableMapping[str, Any], model_prefix: str = "",
                       metadata: Mapping[str, str] | None = None) -> tuple[MutableMapping[str, Any], Any]:
    """Today's ComfyUI (comfy/utils.py): `(state_dict, metadata)` with every quantised layer
    described by a `<layer>.comfy_quant` tensor (uint8 bytes of its JSON description), the form
    comfy_core/weights/quant_registry.py reads.

    - File metadata holding `_quantization_metadata` (`{"layers": {layer: description}}`): each
      layer's `comfy_quant` tensor is added to `state_dict` (returned; metadata unchanged).
    - Else a legacy scaled-fp8 model (a `<model_prefix>scaled_fp8` marker,
      comfy_core/models/storage_cast.py): the model's tensors are taken out of `state_dict` (as
      ComfyUI pops them) into the returned dict without the marker, each `scale_weight` renamed
      `weight_scale` (the layer described as `{"format": <the marker's fp8 dtype, float8_e4m3fn
      for a float32 marker>}`, plus `"full_precision_matrix_mult": true` for a two-element
      marker), each `scale_input` renamed `input_scale` unless it is 1; tensors outside the prefix
      are kept as they are.
    - Else nothing changes."""
    import json

    import torch

    from comfy_core.models.storage_cast import (SCALE_INPUT, SCALE_WEIGHT, SCALED_FP8_MARKER, marker_optimizations,
                                                scaled_storage_dtype)
    from comfy_core.weights.quant_registry import COMFY_QUANT, METADATA_KEY

    if metadata is None:
        metadata = {}
    layers: Mapping[str, Any] | None = None
    marker_key = model_prefix + SCALED_FP8_MARKER
    if METADATA_KEY in metadata:
        layers = json.loads(metadata[METADATA_KEY])["layers"]
    elif marker_key in state_dict:
        marker = state_dict[marker_key]
        conf: dict[str, Any] = {"format": str(scaled_storage_dtype(marker)).removeprefix("torch.")}
        if not marker_optimizations(marker):  # a two-element marker: ComfyUI's full-precision products
            conf["full_precision_matrix_mult"] = True
        converted: dict[str, Any] = {}
        found: dict[str, Any] = {}
        for key in list(state_dict.keys()):
            if key == marker_key:
                continue
            if not key.startswith(model_prefix):
                converted[key] = state_dict[key]
                continue
            tensor = state_dict.pop(key)
            layer, _, part = key.rpartition(".")
            if part == SCALE_WEIGHT:
                found[layer] = dict(conf)
                key = f"{layer}.weight_scale"
            elif part == SCALE_INPUT:
                if tensor.item() == 1.0:
                    continue  # the default: no input scale
                key = f"{layer}.input_scale"
            converted[key] = tensor
        state_dict, layers = converted, found
    for layer, description in (layers or {}).items():
        state_dict[f"{layer}.{COMFY_QUANT}"] = torch.tensor(list(json.dumps(description).encode("utf-8")),
                                                            dtype=torch.uint8)
    return state_dict, metadata
