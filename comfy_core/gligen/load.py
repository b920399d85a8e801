"""Loading a GLIGEN file (`gligen_sd14_textbox_pruned.safetensors` and the like) as its own object.

After ComfyUI's `comfy/gligen.py: load_gligen`: the fusers are the tensors under
`<group>.<index>.<...>.fuser.*` for group input_blocks, middle_block, output_blocks and index
0..19, in that order (so the i-th fuser belongs to the UNet's i-th SpatialTransformer); each
fuser's query width and text width are read from its `linear.weight` [query, key]; the position
net's widths from `position_net.null_positive_feature` [in] and `position_net.linears.4.weight`
[out, hidden]. Unlike ComfyUI (which loads non-strictly and leaves missing tensors at their
initial values), every module tensor must come from the file with the right shape.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.gligen.model import GatedSelfAttention, GligenModel, PositionNet, heads_for
from comfy_core.patching.patcher import Patcher

GROUPS = ("input_blocks", "middle_block", "output_blocks")
MAX_BLOCK_INDEX = 20  # ComfyUI looks at block indices 0..19
_FUSER = re.compile(r"(input_blocks|middle_block|output_blocks)\.(\d+)\..*?\.fuser\.(.+)$")


def fuser_keys(names: list[str] | set[str]) -> list[dict[str, str]]:
    """Per fuser, in UNet order: {fuser parameter name: file key}."""
    grouped: dict[tuple[int, int], dict[str, str]] = {}
    for name in names:
        match = _FUSER.search(name)
        if match and int(match.group(2)) < MAX_BLOCK_INDEX:
            grouped.setdefault((GROUPS.index(match.group(1)), int(match.group(2))), {})[match.group(3)] = name
    return [grouped[key] for key in sorted(grouped)]


def load_gligen(path: str | Path, *, load_device: torch.device | str | None = None,
                offload_device: torch.device | str | None = None) -> Patcher:
    """A GLIGEN file -> the GLIGEN wire object: a `Patcher` whose `.model` is a `GligenModel`
    (float32; its position net runs in float32 as ComfyUI's casting layers make it)."""
    with CheckpointFile(path) as checkpoint:
        names = set(checkpoint.keys())
        groups = fuser_keys(names)
        if not groups or "position_net.null_positive_feature" not in names:
            raise MissingComponentError(checkpoint.path, "not a GLIGEN model: no '*.fuser.*' gated attention "
                                                         "tensors and 'position_net.*' keys")
        fusers, sources = [], {}
        key_dim = None
        for index, keys in enumerate(groups):
            if "linear.weight" not in keys:
                raise ShapeMismatchError(checkpoint.path, f"GLIGEN fuser {index}: no linear.weight")
            query_dim, key_dim = (int(d) for d in checkpoint.tensors[keys["linear.weight"]].shape)
            heads, dim_head = heads_for(query_dim, key_dim)
            fusers.append(GatedSelfAttention(query_dim, key_dim, heads, dim_head))
            sources.update({f"module_list.{index}.{suffix}": key for suffix, key in keys.items()})
        in_dim = int(checkpoint.tensors["position_net.null_positive_feature"].shape[0])
        out_shape = checkpoint.tensors.get("position_net.linears.4.weight")
        if out_shape is None:
            raise ShapeMismatchError(checkpoint.path, "GLIGEN: position_net.linears.4.weight is missing")
        out_dim, hidden = (int(d) for d in out_shape.shape)
        position_net = PositionNet(in_dim, out_dim, hidden)
        sources.update({name: name for name in names if name.startswith("position_net.")})
        model = GligenModel(fusers, position_net, key_dim)
        expected = model.state_dict()
        missing = sorted(set(expected) - set(sources))
        if missing:
            raise ShapeMismatchError(checkpoint.path, f"GLIGEN: {len(missing)} tensors missing, e.g. {', '.join(missing[:4])}")
        state = {}
        for name, meta in expected.items():
            tensor = checkpoint.read(sources[name], torch.float32)
            if tuple(tensor.shape) != tuple(meta.shape):
                raise ShapeMismatchError(checkpoint.path, f"GLIGEN: {sources[name]} is {list(tensor.shape)}, "
                                                          f"the model needs {list(meta.shape)}")
            state[name] = tensor
        model.load_state_dict(state, strict=True)
    model.eval()
    model.requires_grad_(False)
    return Patcher(model, load_device=load_device, offload_device=offload_device)
