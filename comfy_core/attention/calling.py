"""Attention functions with ComfyUI's calling convention (`comfy/ldm/modules/attention.py`).

`f(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
skip_output_reshape=False, **kwargs)`: q/k/v are `[B, N, heads*d]` (or `[B, heads, N, d]` with
`skip_reshape`), the result `[B, Nq, heads*dv]` (or `[B, heads, Nq, dv]` with
`skip_output_reshape`). A 2-D mask `[Nq, Nk]` gets a batch axis and a 3-D one `[B, Nq, Nk]` a
heads axis, as ComfyUI's `attention_pytorch` does. Every function honours
`transformer_options["optimized_attention_override"]` (`wrap_attn`, ComfyUI's hook that lets a
patcher swap the kernel per model: `override(func, *args, **kwargs)`).

`attention_in_force` runs the backend the model's patcher chose (`comfy_core.attention`'s
context variable): it is what the UNet calls by default (`optimized_attention`). The others pin
one kernel: `attention_pytorch` (sdpa), `attention_basic` (the full score matrix, fp32),
`attention_sub_quad`, `attention_split`, `attention_xformers`; `attention_sage` and
`attention_flash` name packages this engine does not run and raise
`AttentionBackendUnavailable`.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from comfy_core.attention import attention, attention_heads
from comfy_core.attention.backends import BACKENDS, AttentionBackendUnavailable, require_backend


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

# ComfyUI's registry of named attention functions (`register_attention_function`).
REGISTERED_ATTENTION_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "pytorch": attention_pytorch, "sub_quad": attention_sub_quad, "split": attention_split,
}


def register_attention_function(name: str, func: Callable[..., torch.Tensor]) -> None:
    """Add `func` under `name` (a name already registered keeps its first function, as ComfyUI)."""
    if name not in REGISTERED_ATTENTION_FUNCTIONS:
        REGISTERED_ATTENTION_FUNCTIONS[name] = func


_MISSING = object()


def get_attention_function(name: str, default: Any = _MISSING) -> Callable[..., torch.Tensor] | None:
    """The function registered as `name`; without a `default`, an unknown name is a KeyError
    naming the registered ones. (ComfyUI's "optimized" name is resolved by
    `comfy_core.models.transformer.get_attention_function`, where the replaceable global lives.)"""
    if name in REGISTERED_ATTENTION_FUNCTIONS:
        return REGISTERED_ATTENTION_FUNCTIONS[name]
    if default is _MISSING:
        raise KeyError(f"attention function {name!r} is not registered; registered: "
                       f"{sorted(REGISTERED_ATTENTION_FUNCTIONS)}")
    return default
