"""Which attention backend runs on a device: SDPA by default, xformers when asked for and it works.

xformers is optional: `comfy_core.attention`'s probe imports it and runs one tiny attention call
on the device and dtype at first use (memoised there). Here that answer becomes a choice: a
requested backend that cannot run falls back to `sdpa` with one log line per backend, device
kind and dtype (not one per call). ComfyUI prefers xformers whenever it imports on an NVIDIA GPU
(comfy/model_management.py `xformers_enabled`); `prefer_xformers=True` gives that behaviour,
the default keeps SDPA (DESIGN.md: SDPA is the default backend).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import torch

from comfy_core.attention import DEFAULT_BACKEND, unavailable_reason

log = logging.getLogger(__name__)

Probe = Callable[[str, torch.device, torch.dtype], "str | None"]
_logged: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def _probe(name: str, device: torch.device, dtype: torch.dtype) -> str | None:
    return unavailable_reason(name, device, dtype)


def attention_backend_for(device: torch.device | str, dtype: torch.dtype, *, requested: str | None = None,
                          prefer_xformers: bool = False, probe: Probe = _probe) -> str:
    """The backend name to run attention with on `device` in `dtype`.

    `requested`: a backend the user chose (a flag, a node); None: the default, which is `sdpa`,
    or `xformers` when `prefer_xformers` and it runs here. A backend whose probe fails gives
    `sdpa`, logged once."""
    device = torch.device(device)
    wanted = requested or ("xformers" if prefer_xformers and device.type == "cuda" else DEFAULT_BACKEND)
    if wanted == DEFAULT_BACKEND:
        return wanted
    problem = probe(wanted, device, dtype)
    if problem is None:
        return wanted
    key = (wanted, device.type, str(dtype))
    with _lock:
        first = key not in _logged
        _logged.add(key)
    if first:
        log.warning("attention: %s cannot run on %s/%s (%s); using %s", wanted, device.type,
                    str(dtype).replace("torch.", ""), problem, DEFAULT_BACKEND)
    return DEFAULT_BACKEND
