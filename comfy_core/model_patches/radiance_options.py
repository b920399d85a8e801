"""ChromaRadianceOptions' model wrapper (today's ComfyUI, comfy_extras/nodes_chroma_radiance.py):
for model calls whose sigma lies in `[end_sigma, start_sigma]`, the call's
`transformer_options["chroma_radiance_options"]` is set to the options (the Chroma Radiance
network reads them: `nerf_tile_size`, ...); other calls run unchanged. The wrapper that was on the
model before is kept and called around it when `preserve_wrapper`, dropped otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

OPTIONS_KEY = "chroma_radiance_options"


@dataclass(frozen=True)
class RadianceOptionsWrapper:
    """`model_function_wrapper(apply_model, args)`; `options` as `(key, value)` pairs, `inner` the
    preserved previous wrapper or None."""

    options: tuple[tuple[str, Any], ...]
    start_sigma: float
    end_sigma: float
    inner: Any = None

    def __call__(self, apply_model: Callable[..., torch.Tensor], args: dict) -> torch.Tensor:
        c = dict(args["c"])
        sigma = float(args["timestep"].max().detach().cpu().item())
        if self.end_sigma <= sigma <= self.start_sigma:
            transformer_options = dict(c.get("transformer_options", {}))
            transformer_options[OPTIONS_KEY] = dict(self.options)
            c["transformer_options"] = transformer_options
        if self.inner is None:
            return apply_model(args["input"], args["timestep"], **c)
        return self.inner(apply_model, {**args, "c": c})

    def cache_signature(self) -> tuple | None:
        # A preserved wrapper of a pack has no identity we can vouch for: key on the node then.
        if self.inner is not None:
            return None
        return ("RadianceOptionsWrapper", self.options, self.start_sigma, self.end_sigma)
