"""SamplerSEEDS2 of today's ComfyUI (comfy_extras/nodes_custom_sampler.py, 2026, V3), declared as
its V3 schema renders it (graph/v3_schema.py); behaviour read from that file, written here.

The node picks the "seeds_2" sampler (comfy_core/sampling/samplers/stochastic_ei.py
`sample_seeds_2`, SEEDS-2 of Gonzalez et al. 2023, arXiv 2305.14267) with its options; the same
sampler covers exp_heun_2_x0 (phi_2, r 1, eta 0) and exp_heun_2_x0_sde (phi_2, r 1, eta 1,
s_noise 1). It returns a `comfy_core.sampling.guider.SamplerObject` for SamplerCustom and
SamplerCustomAdvanced; torch is not imported here (start-up stays torch-free).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, Float, Output, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_custom_sampler"
SOLVER_TYPES = ["phi_1", "phi_2"]
DESCRIPTION = ("This sampler node can represent multiple samplers:\n\n"
               "seeds_2\n"
               "- default setting\n\n"
               "exp_heun_2_x0\n"
               "- solver_type=phi_2, r=1.0, eta=0.0\n\n"
               "exp_heun_2_x0_sde\n"
               "- solver_type=phi_2, r=1.0, eta=1.0, s_noise=1.0")


@v3_node("SamplerSEEDS2", category="model/sampling/samplers", python_module=MODULE, description=DESCRIPTION,
         search_aliases=["sde", "exp heun"],
         inputs=[Combo("solver_type", SOLVER_TYPES),
                 Float("eta", default=1.0, min=0.0, max=100.0, step=0.01, round=False, tooltip="Stochastic strength",
                       advanced=True),
                 Float("s_noise", default=1.0, min=0.0, max=100.0, step=0.01, round=False,
                       tooltip="SDE noise multiplier", advanced=True),
                 Float("r", default=0.5, min=0.01, max=1.0, step=0.01, round=False,
                       tooltip="Relative step size for the intermediate stage (c2 node)", advanced=True)],
         outputs=[Output("SAMPLER")])
def sampler_seeds2(solver_type: str, eta: float, s_noise: float, r: float) -> tuple[Any]:
    """The seeds_2 sampler with `{"eta", "s_noise", "r", "solver_type"}` as its options."""
    from comfy_core.sampling.guider import ksampler

    if solver_type not in SOLVER_TYPES:
        raise NodeInputError("solver_type", f"one of {SOLVER_TYPES}", repr(solver_type))
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not r > 0:
        raise NodeInputError("r", "a FLOAT > 0 (the intermediate stage's relative step)", repr(r))
    return (ksampler("seeds_2", {"eta": eta, "s_noise": s_noise, "r": r, "solver_type": solver_type}),)
