"""Attention functions with ComfyUI's calling convention (`comfy/ldm/modules/attention.py`).

`f(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
skip_output_reshape=False, **kwargs)`: q/k/v are `[B, N, heads*d]` (or `[B, heads, N, d]` with
`skip_reshape`), the result `[B, Nq, heads*dv]` (or `[B, heads, Nq, dv]` with
`skip_output_reshape`). A 2-D mask `[Nq, Nk]` gets a batch axis and a 3-D one `[B, Nq, Nk]` a
heads axis, as ComfyUI's `attention_pytorch` does. Every function honours
`transformer_options["optimized_attention_override"]` (`wrap_attn`, ComfyUI's hook that lets a
patcher swap the kernel per model: `override(func, *args, **kwargs)`).

`attend` / `attend_masked` are what every model block calls: the replacement named by the
`ExtensionPoints` in force (`attention` / `attention_masked`; a pack's assignment to ComfyUI's
`optimized_attention`, through compat) or else `attention_in_force`, the backend the model's
patcher chose (`comfy_core.attention`'s context variable). The others pin
one kernel: `attention_pytorch` (sdpa), `attention_basic` (the full score matrix, fp32),
`attention_sub_quad`, `attention_split`, `attention_xformers`; `attention_sage` and
`attention_flash` name packages this engine does not run and raise
`AttentionBackendUnavailable`.
"""
from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Callable, Mapping

import torch

from comfy_core import extension_points
from comfy_core.attention import attention, attention_heads
from comfy_core.attention.backends import BACKENDS, AttentionBackendUnavailable, require_backend
from comfy_core.extension_points import ExtensionPoints


def wrap_attn(func: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Route a call through `transformer_options["optimized_attention_override"]` when one is set
    (once: the override receives `func` and may call it, which then runs unwrapped)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.pop("_inside_attn_wrapper", False):
            return func(*args, **kwargs)
        options = kwargs.get("transformer_options")
        if options is not None and "optimized_attention_override" in options:
            return options["optimized_attention_override"](func, *args, _inside_attn_wrapper=True, **kwargs)
        return func(*args, **kwargs)

    return wrapper


def _normalise_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    if mask is None:
        return None
    if mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)
    return mask


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    b, n, width = t.shape
    return t.reshape(b, n, heads, width // heads).transpose(1, 2)  # [B, H, N, d]


def _run(kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor],
         q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: torch.Tensor | None,
         skip_reshape: bool, skip_output_reshape: bool) -> torch.Tensor:
    mask = _normalise_mask(mask)
    if not skip_reshape:
        q, k, v = (_split_heads(t, heads) for t in (q, k, v))
    out = kernel(q, k, v, mask)  # [B, H, Nq, dv]
    if skip_output_reshape:
        return out
    b, h, nq, dv = out.shape
    return out.transpose(1, 2).reshape(b, nq, h * dv)


def _backend_kernel(name: str) -> Callable[..., torch.Tensor]:
    backend = BACKENDS[name]

    def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        require_backend(name, q.device, q.dtype)
        if mask is not None and mask.dtype == torch.bool and not backend.takes_bool_mask:
            mask = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, float("-inf"))
        return backend.kernel(q, k, v, mask)

    return kernel


@wrap_attn
def attention_in_force(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                       mask: torch.Tensor | None = None, attn_precision: Any = None, skip_reshape: bool = False,
                       skip_output_reshape: bool = False, **kwargs: Any) -> torch.Tensor:
    """The backend the running model's patcher chose (sdpa by default). `attn_precision` is
    accepted and, as in ComfyUI's sdpa path, does not change the kernel."""
    if not skip_reshape and not skip_output_reshape:
        # The exact path every built-in attention takes (same ops, so bit-identical results).
        return attention(q, k, v, heads, mask=_normalise_mask(mask))
    return _run(attention_heads, q, k, v, heads, mask, skip_reshape, skip_output_reshape)


def _pinned(name: str, doc: str) -> Callable[..., torch.Tensor]:
    kernel = _backend_kernel(name)

    def pinned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: torch.Tensor | None = None,
               attn_precision: Any = None, skip_reshape: bool = False, skip_output_reshape: bool = False,
               **kwargs: Any) -> torch.Tensor:
        return _run(kernel, q, k, v, heads, mask, skip_reshape, skip_output_reshape)

    pinned.__doc__ = doc
    return wrap_attn(pinned)


attention_pytorch = _pinned("sdpa", "torch's scaled_dot_product_attention, whatever the patcher chose.")
attention_basic = _pinned("naive", "The full score matrix, softmax in fp32 (the reference kernel).")
attention_sub_quad = _pinned("sub_quadratic", "Chunked queries and keys (Rabe & Staats 2021).")
attention_split = _pinned("split", "Queries sliced to fit free memory.")
attention_xformers = _pinned("xformers", "xformers' memory_efficient_attention (raises when it cannot run).")
for _f, _name in ((attention_pytorch, "attention_pytorch"), (attention_basic, "attention_basic"),
                  (attention_sub_quad, "attention_sub_quad"), (attention_split, "attention_split"),
                  (attention_xformers, "attention_xformers")):
    _f.__name__ = _f.__qualname__ = _name


def _unsupported(name: str, package: str) -> Callable[..., torch.Tensor]:
    def unsupported(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AttentionBackendUnavailable(name, f"this engine has no {package} kernel; use attention_pytorch, "
                                                f"attention_sub_quad, attention_split or attention_xformers")

    unsupported.__name__ = unsupported.__qualname__ = f"attention_{name}"
    return wrap_attn(unsupported)


attention_sage = _unsupported("sage", "SageAttention (sageattention)")
attention_flash = _unsupported("flash", "FlashAttention (flash_attn)")

# The named attention functions every runtime has (ComfyUI's `REGISTERED_ATTENTION_FUNCTIONS`
# before any pack registers one); a host's own names live on its `ExtensionPoints`
# (`attention_functions`), never in a process-wide table.
BUILT_IN_ATTENTION_FUNCTIONS: Mapping[str, Callable[..., torch.Tensor]] = MappingProxyType({
    "pytorch": attention_pytorch, "sub_quad": attention_sub_quad, "split": attention_split,
})


def registered_attention_functions(points: ExtensionPoints | None = None) -> dict[str, Callable[..., torch.Tensor]]:
    """The named attention functions of `points` (the ones in force by default): the built-in
    three, then the host's (ComfyUI's `register_attention_function` keeps a name's first
    function, so a built-in name is never replaced)."""
    points = extension_points.current() if points is None else points
    table = dict(BUILT_IN_ATTENTION_FUNCTIONS)
    for name, func in points.attention_functions.items():
        table.setdefault(name, func)
    return table


def attention_function(masked: bool = False, points: ExtensionPoints | None = None) -> Callable[..., torch.Tensor]:
    """What ComfyUI's `optimized_attention` (`optimized_attention_masked` with `masked`) is in
    this context: the host's replacement on `points` (the ones in force by default), else the
    backend the patcher chose (`attention_in_force`)."""
    points = extension_points.current() if points is None else points
    override = points.attention_masked if masked else points.attention
    return attention_in_force if override is None else override


def attend(*args: Any, **kwargs: Any) -> torch.Tensor:
    """The attention every model block calls, with ComfyUI's `optimized_attention` arguments
    (`q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False, ...`): the host's
    replacement in force (`ExtensionPoints.attention`, a pack assigning
    `comfy.ldm.modules.attention.optimized_attention`), else `attention_in_force`. Looked up at
    every call, so the run sees the extension points of the context it runs in."""
    return attention_function(False)(*args, **kwargs)


def attend_masked(*args: Any, **kwargs: Any) -> torch.Tensor:
    """`attend` for the callers ComfyUI routes to `optimized_attention_masked` (a mask is given)."""
    return attention_function(True)(*args, **kwargs)


_MISSING = object()


def get_attention_function(name: str, default: Any = _MISSING,
                           points: ExtensionPoints | None = None) -> Callable[..., torch.Tensor] | None:
    """ComfyUI's lookup by name: "optimized" is the `optimized_attention` in force
    (`attention_function()`), other names the registered functions
    (`registered_attention_functions`); without a `default`, an unknown name is a KeyError naming
    the registered ones."""
    if name == "optimized":
        return attention_function(False, points)
    table = registered_attention_functions(points)
    if name in table:
        return table[name]
    if default is _MISSING:
        raise KeyError(f"attention function {name!r} is not registered; registered: {sorted(table)}")
    return default
