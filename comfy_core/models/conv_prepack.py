"""CPU convolutions with their weights reordered once, not on every call.

On the CPU, `F.conv2d` runs oneDNN (mkldnn) kernels that want the weight in a blocked layout
(`OIhw8i8o` on AVX2): every call reorders the plain `[O, I, kh, kw]` weight into it, then
convolves. Where the weight is large and the image small (SD1.5's 1280-channel 3x3 convolutions
at 8x8 and 16x16 latent pixels) the reorder costs as much as the convolution: measured here on
one AVX2 core at a 512x512 image, batch 2, `[1280, 1280, 3, 3]` at 8x8 took 101 ms plain against
41 ms with the weight reordered ahead (`bench/conv_prepack.py` prints the table). Large images
gain nothing (the reorder is amortised) and oneDNN's blocked path is slower there, so only
convolutions small enough in pixels and big enough in weight are packed.

`PrepackedConvMode` is a torch-function mode entered around a CPU forward of the diffusion
model: each `F.conv2d` that qualifies runs `mkldnn._convolution_pointwise` on a packed copy of
its weight held by a `PrepackCache`. The cache belongs to the model (one per DiffusionModel),
holds each packed weight only while the plain weight lives, and repacks when the weight changes
in place (a LoRA applied or restored by the patcher bumps the tensor's version counter). It packs
only while the host keeps `MEMORY_MARGIN` available after the copy, so on a tight machine the
plain path runs instead.

A weight is packed the second time it is called with the same input layout, not the first. The
packing is a reorder into freshly allocated memory: 30 ms for a `[1280, 1280, 3, 3]` weight on
pages the process already holds, up to 200 ms where the pages are new to it (measured on a 2-core
cloud VM, the first forward of an SD1.5 UNet: its 27 packings took 4.4 s of a 13.9 s forward),
against 15-20 ms saved a call. So the first forward of a model runs as fast as the plain path
(the cold prompt's first step), and a single call (a one-step sampler, an auxiliary model's one
forward) never pays for a packing it cannot win back. Nothing global is patched; outside the mode `F.conv2d` is untouched.
This is the weight pre-packing that `torch.compile`'s freezing does for CPU inference, without a
compile step.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# Pack a convolution when its output has at most this many pixels over the batch (N*H*W) and its
# weight at least this many elements: the measured cases where the reorder outweighs the gain.
MAX_PIXELS = 1024
MIN_WEIGHT_ELEMENTS = 1 << 20
MEMORY_MARGIN = 4 << 30  # bytes of host memory left available after packing, or no packing


def available() -> bool:
    """oneDNN's packed-convolution ops exist in this torch build."""
    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_convolution_pointwise")


def _host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None (then no packing: unknown headroom)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _pair(value: Any) -> list[int] | None:
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return list(value)
    if isinstance(value, (tuple, list)) and len(value) == 1 and isinstance(value[0], int):
        return [value[0], value[0]]
    return None  # 'same' / 'valid' strings and anything else: the plain path


class PrepackCache:
    """Packed copies of convolution weights, keyed by the plain weight tensor's identity.

    An entry dies with its weight (a weakref callback) and is rebuilt when the weight's version
    counter moved (written in place) or the input shape it was packed for changed. A weight seen
    once has an entry with no packed copy yet (module docstring: packed on the second call).
    """

    def __init__(self, memory_margin: int = MEMORY_MARGIN) -> None:
        self.memory_margin = memory_margin
        # id(weight) -> (weakref to it, its version, the call's key, packed copy or None, bytes)
        self._entries: dict[int, tuple[weakref.ref, int, tuple, torch.Tensor | None, int]] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> "PrepackCache":
        """A copied model (deepcopy, pickle) starts with an empty cache: packed copies belong to
        the weights they were made from, which the copy does not share."""
        return PrepackCache(self.memory_margin)

    def __reduce__(self) -> tuple:
        return PrepackCache, (self.memory_margin,)

    def packed_bytes(self) -> int:
        with self._lock:
            return sum(entry[4] for entry in self._entries.values() if entry[3] is not None)

    def __len__(self) -> int:
        """How many weights have a packed copy."""
        return sum(1 for entry in self._entries.values() if entry[3] is not None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def packed(self, weight: torch.Tensor, key: tuple, padding: list[int], stride: list[int],
               dilation: list[int], groups: int, input_shape: list[int]) -> torch.Tensor | None:
        """The packed weight for this call, packing it now if needed; None: use the plain path."""
        try:
            version = weight._version
        except RuntimeError:  # an inference tensor: written in place untracked, so never cached
            return None
        ident = id(weight)
        entry = self._entries.get(ident)
        current = entry is not None and entry[0]() is weight and entry[1] == version and entry[2] == key
        if current and entry[3] is not None:
            return entry[3]
        nbytes = weight.numel() * weight.element_size()
        if not current:  # first call in this state: remember it, run plain (module docstring)
            self._remember(weight, ident, version, key, None, nbytes)
            return None
        headroom = _host_available_bytes()  # a stale copy was dropped on the first call: this one is new memory
        if headroom is None or headroom - nbytes < self.memory_margin:
            return None
        # One reorder straight from the dense weight (not through an mkldnn-tensor copy first):
        # half the first forward's packing time.
        packed = torch.ops.mkldnn._reorder_convolution_weight(weight.detach(), padding, stride, dilation, groups,
                                                              input_shape)
        self._remember(weight, ident, version, key, packed, nbytes)
        return packed

    def _remember(self, weight: torch.Tensor, ident: int, version: int, key: tuple, packed: torch.Tensor | None,
                  nbytes: int) -> None:
        entries = self._entries

        def forget(_ref: weakref.ref, ident: int = ident) -> None:
            entries.pop(ident, None)

        with self._lock:
            entries[ident] = (weakref.ref(weight, forget), version, key, packed, nbytes)


def _conv_arguments(args: tuple, kwargs: dict) -> tuple | None:
    """(input, weight, bias, stride, padding, dilation, groups) of an `F.conv2d` call, or None."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    defaults = (None, None, None, 1, 0, 1, 1)
    values = list(args) + [kwargs.get(n, d) for n, d in zip(names[len(args):], defaults[len(args):])]
    if len(values) != 7:
        return None
    return tuple(values)


class PrepackedConvMode(TorchFunctionMode):
    """Inside: qualifying CPU `F.conv2d` calls use packed weights from `cache` (module docstring)."""

    def __init__(self, cache: PrepackCache) -> None:
        super().__init__()
        self.cache = cache

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.conv2d or func is torch.conv2d:
            out = self._packed_conv(args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)

    def _packed_conv(self, args: tuple, kwargs: dict) -> torch.Tensor | None:
        parsed = _conv_arguments(args, kwargs)
        if parsed is None:
            return None
        x, weight, bias, stride, padding, dilation, groups = parsed
        if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or x.dim() != 4 or weight.dim() != 4:
            return None
        if x.device.type != "cpu" or weight.device.type != "cpu" or x.dtype != torch.float32 \
                or weight.dtype != torch.float32 or groups != 1 or weight.shape[2] * weight.shape[3] == 1:
            return None
        if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != torch.float32):
            return None
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return None  # training: autograd needs the plain op
        stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
        if stride is None or padding is None or dilation is None:
            return None
        if weight.numel() < MIN_WEIGHT_ELEMENTS or not isinstance(weight, torch.nn.Parameter):
            # Only a module's own weight lives across calls: a weight made for this call (fp8 or
            # GGUF storage cast at run time) would be packed, used once and dropped, dearer than
            # the per-call reorder it replaces.
            return None
        out_h = (x.shape[2] + 2 * padding[0] - dilation[0] * (weight.shape[2] - 1) - 1) // stride[0] + 1
        out_w = (x.shape[3] + 2 * padding[1] - dilation[1] * (weight.shape[3] - 1) - 1) // stride[1] + 1
        if x.shape[0] * out_h * out_w > MAX_PIXELS:
            return None
        shape = list(x.shape)
        key = (tuple(shape), tuple(stride), tuple(padding), tuple(dilation))
        packed = self.cache.packed(weight, key, padding, stride, dilation, groups, shape)
        if packed is None:
            return None
        return torch.ops.mkldnn._convolution_pointwise(x, packed, bias, padding, stride, dilation, groups,
                                                       "none", [], "")
