"""Giving modules built on the meta device their tensors from a checkpoint file.

File-format work only, generic over `nn.Module`: which tensors a prefix holds and in which dtype
to read them (`tensor_requests`), and assigning them to a module by name with shape checks and
key conversions (`materialize`). What the modules are (families, UNet, VAE, text encoders) is
decided above this package, in `comfy_core.loading`.
"""
from __future__ import annotations

import itertools
import logging
from typing import Iterable, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.bulk import DEFAULT_WORKERS, load_tensors
from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.meta_build import build_on_meta, meta_build  # noqa: F401  (loaders import both steps here)
from comfy_core.checkpoint.keys import KeyConversion, find_conversion, strip_prefix
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile

log = logging.getLogger(__name__)


def tensor_requests(checkpoint: CheckpointFile, prefix: str, dtype: torch.dtype) -> dict[str, torch.dtype]:
    """`{name: dtype to load it in}` for every tensor under `prefix`: floating ones in `dtype`,
    the others as stored."""
    return {name: dtype if TORCH_DTYPES[info.dtype].is_floating_point else TORCH_DTYPES[info.dtype]
            for name, info in checkpoint.tensors.items() if name.startswith(prefix)}


def stored_requests(checkpoint: CheckpointFile, prefix: str) -> dict[str, torch.dtype]:
    """`{name: its stored dtype}` for every tensor under `prefix`: read as the file holds them (fp8
    towers whose scales must not be rounded to fp8)."""
    return {name: TORCH_DTYPES[info.dtype] for name, info in checkpoint.tensors.items() if name.startswith(prefix)}


def materialize(module: nn.Module, checkpoint: CheckpointFile, prefix: str, dtype: torch.dtype,
                component: str, conversions: Iterable[KeyConversion] = (), *, zero_copy: bool = True,
                workers: int = DEFAULT_WORKERS, loaded: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """Give `module` (built on the meta device) the tensors under `prefix`, by assignment.

    Every parameter and buffer must have a tensor of the same shape (or one a `conversions` entry
    explains); tensors under the prefix that the module does not use are logged. Floating tensors
    are stored in `dtype`; those already in it are views of the file mapping when `zero_copy`.
    `loaded`: tensors already read (e.g. by a `BulkRead` started before the module was built);
    the others are read here.
    """
    conversions = tuple(conversions)
    expected = module.state_dict()  # name -> meta tensor (shape, dtype)
    stored = strip_prefix(checkpoint.tensors, prefix)
    missing = sorted(set(expected) - set(stored))
    if missing:
        raise ShapeMismatchError(
            checkpoint.path, f"{component}: {len(missing)} tensors missing under {prefix!r}, e.g. "
                             f"{', '.join(prefix + m for m in missing[:5])}")
    plan: dict[str, KeyConversion | None] = {}
    for name, meta in expected.items():
        shape = tuple(meta.shape)
        have = checkpoint.tensors[stored[name]].shape
        if have == shape:
            plan[name] = None
            continue
        conversion = find_conversion(conversions, stored[name], have, shape)
        if conversion is None:
            raise ShapeMismatchError(
                checkpoint.path, f"{component}: tensor {stored[name]!r} has shape {list(have)}, "
                                 f"the detected architecture needs {list(shape)}")
        plan[name] = conversion
    # Scaled-fp8 scales and markers are read by the layers after materializing, not unused.
    unused = sorted(name for name in set(stored) - set(expected)
                    if not name.endswith(("scale_weight", "scale_input", "scaled_fp8")))
    if unused:
        log.warning("%s: %d unused tensors under %r in %s, e.g. %s", component, len(unused), prefix,
                    checkpoint.path.name, ", ".join(unused[:3]))
    wanted = {name: dtype if meta.is_floating_point() else meta.dtype for name, meta in expected.items()}
    loaded = dict(loaded or {})
    todo = {stored[name]: wanted[name] for name in expected if stored[name] not in loaded}
    if todo:
        loaded.update(load_tensors(checkpoint, todo, zero_copy=zero_copy, workers=workers))
    state = {}
    for name, meta in expected.items():
        tensor = loaded[stored[name]]
        if tensor.dtype != wanted[name]:  # read for another use in another dtype: cast now
            tensor = tensor.to(wanted[name])
        conversion = plan[name]
        state[name] = tensor if conversion is None else conversion.convert(tensor, tuple(meta.shape))
    module.load_state_dict(state, strict=True, assign=True)
    # A tensor outside the state dict (a non-persistent buffer) would still be on meta: that is a
    # module the loader cannot fill, so say so rather than fail at the first forward.
    left = [n for n, t in itertools.chain(module.named_parameters(), module.named_buffers()) if t.is_meta]
    if left:
        raise ShapeMismatchError(checkpoint.path, f"{component}: {len(left)} module tensors have no checkpoint "
                                                  f"tensor (not in its state dict), e.g. {', '.join(left[:5])}")
    return module

