"""The table of attention backends and the per-context choice of one.

The backend in force is held in a `ContextVar` (`use_backend()`), set by `Patcher.applied()` from
the patcher's `attention_backend` option. It is never a module or class switch, so two clones
with different backends can run in the same process, in different threads or asyncio tasks,
without seeing each other's choice (worker threads started by the executor copy the context).
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

import torch

from comfy_core.attention import kernels
from comfy_core.attention.xformers_kernel import xformers_attention, xformers_problem
# The names, in order, live in a torch-free module (the node layer's combos are made from them).
from comfy_core.attention_names import BACKEND_NAMES, DEFAULT_BACKEND


class AttentionBackendError(ValueError):
    """An attention backend was asked for that does not exist or takes other options."""


class AttentionBackendUnavailable(RuntimeError):
    """An attention backend exists but cannot run here; the message names what is missing."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"attention backend {name!r} is not available: {reason}")
        self.backend = name
        self.reason = reason


def _always(_device: torch.device | None, _dtype: torch.dtype | None) -> str | None:
    return None


def _xformers_problem(device: torch.device | None, dtype: torch.dtype | None) -> str | None:
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return xformers_problem(device, dtype or torch.float16)


@dataclass(frozen=True)
class AttentionBackend:
    """One backend: its kernel, the keyword options the kernel accepts, and an availability probe.

    `problem(device, dtype)` returns None when the backend can run there, otherwise the reason.
    `takes_bool_mask` kernels get the caller's mask unchanged; the others get an additive mask.
    """

    name: str
    kernel: Callable[..., torch.Tensor]
    description: str
    options: frozenset[str] = frozenset()
    problem: Callable[[torch.device | None, torch.dtype | None], str | None] = _always
    takes_bool_mask: bool = False


_IMPLEMENTED: Mapping[str, AttentionBackend] = {
    b.name: b for b in (
        AttentionBackend("sdpa", kernels.sdpa_attention,
                         "torch.nn.functional.scaled_dot_product_attention (default)", takes_bool_mask=True),
        AttentionBackend("sub_quadratic", kernels.sub_quadratic_attention,
                         "chunked queries and keys, memory bounded (Rabe & Staats 2021)",
                         frozenset({"query_chunk_size", "kv_chunk_size"})),
        AttentionBackend("split", kernels.split_attention,
                         "queries sliced to fit free memory", frozenset({"slices", "memory_fraction"})),
        AttentionBackend("naive", kernels.naive_attention, "full score matrix in fp32 (reference)"),
        AttentionBackend("xformers", xformers_attention,
                         "xformers memory_efficient_attention (optional extra, CUDA only)",
                         problem=_xformers_problem),
    )
}
# In BACKEND_NAMES' order; a name without an implementation fails here, at import, not at first use.
BACKENDS: Mapping[str, AttentionBackend] = MappingProxyType({name: _IMPLEMENTED[name] for name in BACKEND_NAMES})


@dataclass(frozen=True)
class AttentionChoice:
    """A backend name plus its options as a sorted tuple of pairs (hashable, for signatures)."""

    name: str = DEFAULT_BACKEND
    options: tuple[tuple[str, Any], ...] = field(default=())

    @classmethod
    def of(cls, name: str, options: Mapping[str, Any] | None = None) -> "AttentionChoice":
        backend = get_backend(name)
        opts = dict(options or {})
        unknown = set(opts) - backend.options
        if unknown:
            raise AttentionBackendError(
                f"attention backend {name!r} takes options {sorted(backend.options) or 'none'}, "
                f"got unknown {sorted(unknown)}")
        return cls(name, tuple(sorted(opts.items())))


def get_backend(name: str) -> AttentionBackend:
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise AttentionBackendError(
            f"unknown attention backend {name!r}; known: {sorted(BACKENDS)}") from None


def backend_names() -> list[str]:
    """Every backend this build knows, available here or not."""
    return list(BACKENDS)


def unavailable_reason(name: str, device: torch.device | None = None,
                       dtype: torch.dtype | None = None) -> str | None:
    """None when backend `name` can run on `device`/`dtype`, else what is missing."""
    return get_backend(name).problem(device, dtype)


def available_backends(device: torch.device | None = None, dtype: torch.dtype | None = None) -> list[str]:
    """The backends this machine can run (on `device`/`dtype` when given), default first."""
    return [name for name, b in BACKENDS.items() if b.problem(device, dtype) is None]


def require_backend(name: str, device: torch.device | None = None,
                    dtype: torch.dtype | None = None) -> AttentionBackend:
    """The backend `name`, or a typed error: unknown name, or unavailable (naming what is missing)."""
    backend = get_backend(name)
    reason = backend.problem(device, dtype)
    if reason is not None:
        raise AttentionBackendUnavailable(name, reason)
    return backend


_choice: contextvars.ContextVar[AttentionChoice] = contextvars.ContextVar(
    "comfy_core_attention_backend", default=AttentionChoice())


def current_backend() -> AttentionChoice:
    """The backend in force in this thread or task."""
    return _choice.get()


@contextlib.contextmanager
def use_backend(choice: AttentionChoice | str, **options: Any) -> Iterator[AttentionChoice]:
    """Run the body with `choice` as the attention backend of this context only."""
    if isinstance(choice, str):
        choice = AttentionChoice.of(choice, options)
    elif options:
        raise AttentionBackendError("use_backend: pass options either in the AttentionChoice or as keywords")
    token = _choice.set(choice)
    try:
        yield choice
    finally:
        _choice.reset(token)
