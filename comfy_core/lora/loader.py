"""Turn a LoRA file's tensors into weight patches, and apply them to MODEL and CLIP patchers.

`parse_lora(tensors, key_map)` groups the file's keys by layer (the part before a known suffix),
looks each layer up in the key map (`comfy_core.lora.keymap`) and builds one adapter per target
weight. Keys whose layer matches nothing, whose suffix is unknown, or whose record is incomplete are
returned as unmatched: `load_lora_for_models` applies the rest and logs each of them once, as
ComfyUI logs "lora key not loaded". (The file formats are those
ComfyUI reads in comfy/lora.py and comfy/weight_adapter/; the parser is written here.)
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

import torch

from comfy_core.weights.adapters import BoftAdapter, GloraAdapter, LohaAdapter, LokrAdapter, LoraAdapter, OftAdapter
from comfy_core.lora.dit_convert import convert_dit_lora
from comfy_core.lora.dit_keymap import dit_kind, row_permutations
from comfy_core.lora.fit import Misfit, drop_misfits
from comfy_core.models.quant_linear import true_weight_shapes
from comfy_core.lora.keymap import text_encoder_key_map, unet_key_map
from comfy_core.weights.errors import PatchDataError

log = logging.getLogger(__name__)

# Suffix -> (record kind, component). Longest suffixes first so `.lora.up.weight` wins over `.weight`.
_SUFFIXES: tuple[tuple[str, str, str], ...] = (
    (".lora_up.weight", "lora", "up"), (".lora_down.weight", "lora", "down"),
    (".lora_mid.weight", "lora", "mid"),
    (".lora.up.weight", "lora", "up"), (".lora.down.weight", "lora", "down"),
    (".lora_B.weight", "lora", "up"), (".lora_A.weight", "lora", "down"),
    (".lora_linear_layer.up.weight", "lora", "up"), (".lora_linear_layer.down.weight", "lora", "down"),
    (".hada_w1_a", "loha", "w1a"), (".hada_w1_b", "loha", "w1b"),
    (".hada_w2_a", "loha", "w2a"), (".hada_w2_b", "loha", "w2b"),
    (".hada_t1", "loha", "t1"), (".hada_t2", "loha", "t2"),
    (".lokr_w1_a", "lokr", "w1a"), (".lokr_w1_b", "lokr", "w1b"),
    (".lokr_w2_a", "lokr", "w2a"), (".lokr_w2_b", "lokr", "w2b"),
    (".lokr_w1", "lokr", "w1"), (".lokr_w2", "lokr", "w2"), (".lokr_t2", "lokr", "t2"),
    (".oft_blocks", "oft", "blocks"), (".rescale", "oft", "rescale"),
    (".a1.weight", "glora", "a1"), (".a2.weight", "glora", "a2"),
    (".b1.weight", "glora", "b1"), (".b2.weight", "glora", "b2"),
    (".diff_b", "diff_b", "diff_b"), (".diff", "diff", "diff"), (".set_weight", "set", "set"),
    (".w_norm", "diff", "diff"), (".b_norm", "diff_b", "diff_b"),
    (".alpha", "*", "alpha"), (".dora_scale", "*", "dora_scale"), (".reshape_weight", "*", "reshape"),
)
# Old diffusers attention-processor names: `attn1.processor.to_q_lora.up.weight` -> `attn1.to_q.lora.up.weight`.
_PROCESSOR = re.compile(r"\.processor\.(to_q|to_k|to_v|to_out)_lora\.(up|down)\.weight$")
# PEFT adapters may carry the adapter name: `.lora_A.default.weight`.
_PEFT_NAMED = re.compile(r"\.(lora_[AB])\.[^.]+\.weight$")


@dataclass
class LoraParse:
    """What a LoRA file holds, resolved against one key map."""

    patches: dict[str, Any] = field(default_factory=dict)  # parameter name -> adapter / ("diff", (t,))
    unmatched: list[str] = field(default_factory=list)  # file keys that patch nothing


def _normalise(key: str) -> str:
    key = _PROCESSOR.sub(lambda m: f".{m.group(1)}{'.0' if m.group(1) == 'to_out' else ''}.lora.{m.group(2)}.weight", key)
    return _PEFT_NAMED.sub(lambda m: f".{m.group(1)}.weight", key)


def _split(key: str) -> tuple[str, str, str] | None:
    for suffix, kind, part in _SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], kind, part
    return None


def parse_lora(tensors: Mapping[str, torch.Tensor], key_map: Mapping[str, str], name: str = "",
               source: Hashable | None = None) -> LoraParse:
    """Resolve a LoRA state dict against `key_map` (LoRA layer name -> parameter name).

    `source` identifies the file's state (e.g. path, mtime, size); the adapters carry it, so a
    re-read of an unchanged file yields patches with the same signature (and cache hits).
    """
    layers: dict[str, dict[str, tuple[str, torch.Tensor]]] = {}
    raw_keys: dict[str, list[str]] = {}
    result = LoraParse()
    for raw_key, tensor in tensors.items():
        split = _split(_normalise(raw_key))
        if split is None:
            result.unmatched.append(raw_key)
            continue
        layer, kind, part = split
        layers.setdefault(layer, {})[part] = (kind, tensor)
        raw_keys.setdefault(layer, []).append(raw_key)
    for layer, parts in layers.items():
        target = key_map.get(layer)
        if target is None:
            result.unmatched.extend(raw_keys[layer])
            continue
        try:
            records = _records(layer, parts, target, name, source)
        except PatchDataError as exc:
            # An incomplete record (an up without its down, ...) loads nothing, as in ComfyUI,
            # whose adapters only load whole records: its keys are not loaded, and the reason logged.
            log.warning("LoRA %s: %s; its keys are not loaded", name or "(unnamed)", exc)
            result.unmatched.extend(raw_keys[layer])
            continue
        for param, record in records:
            result.patches[param] = record
    return result


def _refuse_dora(kind: str, label: str, dora_scale: torch.Tensor | None) -> None:
    """OFT, BOFT and GLoRA records with a DoRA scale are not supported: their keys are not loaded."""
    if dora_scale is not None:
        raise PatchDataError(f"{kind} {label!r}: a DoRA scale on {kind} is not supported")


def _records(layer: str, parts: dict[str, tuple[str, torch.Tensor]], target: Any, name: str,
             source: Hashable | None) -> list[tuple[Any, Any]]:
    kinds = {kind for kind, _ in parts.values()} - {"*"}
    get = lambda p: parts[p][1] if p in parts else None  # noqa: E731
    alpha_t = get("alpha")
    alpha = None if alpha_t is None else float(alpha_t.float().item())
    label = f"{name}:{layer}" if name else layer
    records: list[tuple[str, Any]] = []
    if "lora" in kinds:
        if get("up") is None or get("down") is None:
            raise PatchDataError(f"LoRA {label!r}: needs both up and down weights, has {sorted(parts)}")
        up, weight_target = get("up"), target
        if get("mid") is None and get("dora_scale") is None and _is_row_permutation(target):
            # A row permutation of the delta (the final adaLN's halves swapped) is the same
            # permutation of `up`, exactly: patch the whole weight the plain way, so the diffusers
            # spelling patches bit-for-bit as the BFL / SAI one does.
            up, weight_target = target[2](up), target[0]
        reshape = get("reshape")
        records.append((weight_target, LoraAdapter(up, get("down"), alpha, get("mid"), get("dora_scale"), label,
                                                   source, None if reshape is None else
                                                   tuple(int(n) for n in reshape.tolist()))))
    elif "loha" in kinds:
        missing = {"w1a", "w1b", "w2a", "w2b"} - set(parts)
        if missing:
            raise PatchDataError(f"LoHa {label!r}: missing {sorted(missing)}")
        records.append((target, LohaAdapter(get("w1a"), get("w1b"), get("w2a"), get("w2b"), alpha,
                                             get("t1"), get("t2"), label, source)))
    elif "lokr" in kinds:
        records.append((target, LokrAdapter(get("w1"), get("w2"), get("w1a"), get("w1b"), get("w2a"),
                                            get("w2b"), get("t2"), alpha, label, source)))
    elif "glora" in kinds:
        missing = {"a1", "a2", "b1", "b2"} - set(parts)
        if missing:
            raise PatchDataError(f"GLoRA {label!r}: missing {sorted(missing)}")
        _refuse_dora("GLoRA", label, get("dora_scale"))
        records.append((target, GloraAdapter(get("a1"), get("a2"), get("b1"), get("b2"), alpha, label, source)))
    elif "oft" in kinds:
        blocks = get("blocks")
        if blocks is None or blocks.dim() not in (3, 4):
            raise PatchDataError(f"OFT {label!r}: needs oft_blocks of 3 (OFT) or 4 (BOFT) dimensions, has "
                                 f"{sorted(parts)}{'' if blocks is None else f' with {blocks.dim()}'}")
        cls, kind = (OftAdapter, "OFT") if blocks.dim() == 3 else (BoftAdapter, "BOFT")
        _refuse_dora(kind, label, get("dora_scale"))
        records.append((target, cls(blocks, get("rescale"), alpha, label, source)))
    elif "diff" in kinds:
        records.append((target, ("diff", (get("diff"),))))
    elif "set" in kinds:
        records.append((target, ("set", (get("set"),))))
    bias = _bias_target(target)
    if "diff_b" in kinds and bias is not None:
        records.append((bias, ("diff", (get("diff_b"),))))
    if not records:
        raise PatchDataError(f"LoRA {label!r}: only {sorted(parts)}, no weights to apply")
    return records


def _is_row_permutation(target: Any) -> bool:
    """Whether `target` is `(name, None, fn)` with `fn` a permutation of the first axis (the
    scale/shift swap of the DiT key maps)."""
    return (isinstance(target, tuple) and len(target) == 3 and target[1] is None
            and target[2] in row_permutations())


def _bias_target(target: Any) -> Any:
    """The bias beside a weight target: `x.bias` for `x.weight`; for a slice or a transformed
    target the same slice / transform of the bias (its first axis is the weight's). None when
    the target is no `.weight`."""
    name = target if isinstance(target, str) else target[0]
    if not name.endswith(".weight"):
        return None
    bias = name[: -len(".weight")] + ".bias"
    return bias if isinstance(target, str) else (bias, *target[1:])


@dataclass
class LoraReport:
    """What applying one LoRA file did."""

    model_keys: int = 0
    clip_keys: int = 0
    unmatched: list[str] = field(default_factory=list)  # file keys that name nothing of model or CLIP
    skipped: list[str] = field(default_factory=list)  # "parameter: why" for records whose shapes do not fit


def add_weight_patches(clone: Any, patches: Mapping[Any, Any], strength: float) -> int:
    """The default way a LoRA's records go onto a clone: merged weight patches; how many keys."""
    return len(clone.add_patches(patches, strength))


def load_lora_for_models(model: Any, clip: Any, tensors: Mapping[str, torch.Tensor],
                         strength_model: float, strength_clip: float, name: str = "",
                         source: Hashable | None = None,
                         apply: Callable[[Any, Mapping[Any, Any], float], int] = add_weight_patches,
                         ) -> tuple[Any, Any, LoraReport]:
    """Clone `model` (a ModelPatcher) and `clip` (CLIP object or ClipPatcher) with the LoRA added.

    ComfyUI's semantics (comfy/sd.py `load_lora_for_models`, comfy/lora.py `load_lora`): either
    may be None, which skips it; strengths scale each side. The file is applied as far as it
    matches: each file key that names nothing of the model or CLIP is logged once ("lora key not
    loaded: KEY", ComfyUI's warning) and left out; a record whose shape does not fit its weight is
    left out with the line ComfyUI logs when it fails to merge one ("WARNING SHAPE MISMATCH ..."
    for a full diff, "ERROR ..." for an adapter), decided here from shapes rather than at every
    patching. A file none of whose keys matches gives clones with no patches, as in ComfyUI. The
    warnings go to the log (the console and the editor's Logs tab); the report lists them too.
    `source` (see `parse_lora`) makes the patches' signatures survive re-reading the file.

    For a Flux / SD3 model (`comfy_core.lora.dit_keymap`), as ComfyUI: files in the layouts
    ComfyUI converts are converted first (`convert_dit_lora`).

    `apply(clone, records, strength) -> count` puts the matched records on each clone: merged
    weight patches by default, a forward-time bypass for LoraLoaderBypass
    (comfy_core/patching/bypass.py `add_bypass`); the matching and its warnings are the same.
    """
    label = name or "(unnamed)"
    dit = dit_kind(model.model) if model is not None else None
    if dit is not None:
        tensors = convert_dit_lora(tensors)
    clip_patcher = getattr(clip, "patcher", clip) if clip is not None else None
    model_parse = parse_lora(tensors, unet_key_map(model.model) if model is not None else {}, name, source)
    clip_parse = parse_lora(tensors, text_encoder_key_map(clip_patcher.model) if clip_patcher is not None else {},
                            name, source)
    report = LoraReport()
    for parse, owner in ((model_parse, model), (clip_parse, clip_patcher)):
        if owner is None:
            continue
        shapes = {k: tuple(v.shape) for k, v in owner.model.state_dict(keep_vars=True).items()}
        shapes.update(true_weight_shapes(owner.model))  # packed quantised weights (NVFP4): their [out, in]
        parse.patches, dropped = drop_misfits(parse.patches, shapes)
        for item in dropped:
            _log_misfit(label, item)
            report.skipped.append(item.line())
    new_model, new_clip = model, clip
    if model is not None:
        new_model = model.clone()
        report.model_keys = apply(new_model, model_parse.patches, strength_model)
    if clip is not None:
        new_clip = clip.clone()
        report.clip_keys = apply(new_clip, clip_parse.patches, strength_clip)
    # A key is unmatched when neither side used it; each is logged once, in the file's order.
    unused = set(model_parse.unmatched) & set(clip_parse.unmatched)
    report.unmatched = [k for k in tensors if k in unused]
    for key in report.unmatched:
        log.warning("lora key not loaded: %s", key)
    if tensors and report.model_keys == 0 and report.clip_keys == 0:
        log.warning("LoRA %s: none of its %d keys patched this %s; it changes nothing (a LoRA for "
                    "another model?)", label, len(tensors),
                    f"{dit + ' model' if dit else 'model'}{' or its CLIP' if clip is not None else ''}")
    return new_model, new_clip, report


def _log_misfit(label: str, item: Misfit) -> None:
    """One skipped record, in ComfyUI's words for a weight it could not merge (comfy/lora.py
    `calculate_weight` for a full diff, the adapters' `calculate_weight` for the others)."""
    record = item.record
    if isinstance(record, tuple) and len(record) == 2 and record[0] in ("diff", "set"):
        tensor = record[1][0]
        log.warning("WARNING SHAPE MISMATCH %s WEIGHT NOT MERGED %s != %s", item.name,
                    tuple(tensor.shape), item.shape)
    else:
        log.error("ERROR %s %s %s; the weight is not patched", label, item.name, item.reason)
