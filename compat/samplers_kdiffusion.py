"""The module type of `comfy.k_diffusion.sampling`: a facade that also forwards new sampler
functions to our namespace.

ComfyUI finds a sampler name's function as `getattr(comfy.k_diffusion.sampling, "sample_" +
name)`, so packs add samplers by assigning a new `sample_<name>` there (smZNodes'
`dpmpp_2m_alt`). `FacadeModule` forwards only the names of its table; this subclass forwards
any `sample_*` name as well, to `comfy_core.sampling.samplers.kdiffusion`, where our sampler
registry looks names up at each run.
"""
from __future__ import annotations

import importlib
from typing import Any

from compat.facade import FacadeModule

NAMESPACE = "comfy_core.sampling.samplers.kdiffusion"


class KDiffusionSamplingModule(FacadeModule):
    """`comfy.k_diffusion.sampling`: facade names resolve lazily; `sample_*` assignments reach our namespace."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("sample_") and name not in self.__dict__.get("_facade_names", {}):
            setattr(importlib.import_module(NAMESPACE), name, value)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        # A pack removing the sampler it added (on unload) removes it from the namespace too.
        if name.startswith("sample_") and name not in self.__dict__.get("_facade_names", {}):
            namespace = importlib.import_module(NAMESPACE)
            if hasattr(namespace, name):
                delattr(namespace, name)
        super().__delattr__(name)
