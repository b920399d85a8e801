"""ComfyUI 0.3.64's attention-guidance and mask/frequency patch nodes: PerturbedAttentionGuidance
(comfy_extras/nodes_pag.py), SelfAttentionGuidance (nodes_sag.py), PerpNeg (nodes_perpneg.py,
deprecated there), DifferentialDiffusion (nodes_differential_diffusion.py) and FreSca
(nodes_fresca.py).

Each returns a clone of the MODEL with one more sampler hook (and, for SAG, an attention
replacement) from comfy_core/model_patches/; the input MODEL is never changed.
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Int, Output, node
import nodes.checks as checks

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).


@node("PerturbedAttentionGuidance", display_name=None, category="model_patches/unet",
      python_module="comfy_extras.nodes_pag",
      inputs=[Input("model", "MODEL"), Float("scale", default=3.0, min=0.0, max=100.0, step=0.01, round=0.01)],
      outputs=[Output("MODEL")])
def perturbed_attention_guidance(model: Any, scale: float) -> tuple[Any]:
    """Guidance away from the positive run with an identity self-attention map in the middle
    block (Ahn et al. 2024)."""
    from comfy_core.model_patches.pag import PerturbedAttentionGuidance

    patched = checks.model(model).clone()
    patched.add_option_function("sampler_post_cfg_function",
                                PerturbedAttentionGuidance(float(checks.number(scale, "scale"))))
    return (patched,)


@node("SelfAttentionGuidance", display_name="Self-Attention Guidance", category="_for_testing",
      python_module="comfy_extras.nodes_sag", experimental=True,
      inputs=[Input("model", "MODEL"), Float("scale", default=0.5, min=-2.0, max=5.0, step=0.01),
              Float("blur_sigma", default=2.0, min=0.0, max=10.0, step=0.1)],
      outputs=[Output("MODEL")])
def self_attention_guidance(model: Any, scale: float, blur_sigma: float) -> tuple[Any]:
    """Guidance away from the negative run on an x0 blurred where the middle block's
    self-attention looks (Hong et al. 2023)."""
    from comfy_core.model_patches.sag import self_attention_guidance as sag

    recorder, hook = sag(float(checks.number(scale, "scale")), float(checks.number(blur_sigma, "blur_sigma")))
    patched = checks.model(model).clone()
    patched.add_option_function("sampler_post_cfg_function", hook, disable_cfg1_optimization=True)
    patched.set_block_replace("attn1", ("middle", 0, 0), recorder)
    return (patched,)


@node("PerpNeg", display_name="Perp-Neg (DEPRECATED by PerpNegGuider)", category="_for_testing",
      python_module="comfy_extras.nodes_perpneg", experimental=True, deprecated=True,
      inputs=[Input("model", "MODEL"), Input("empty_conditioning", "CONDITIONING"),
              Float("neg_scale", default=1.0, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("MODEL")])
def perp_neg(model: Any, empty_conditioning: list, neg_scale: float) -> tuple[Any]:
    """CFG replaced by Perp-Neg against `empty_conditioning` (one more model pass per step)."""
    from comfy_core.model_patches.perp_neg import PerpNegCFG

    empty = checks.conditioning(empty_conditioning, "empty_conditioning", tokens=True)
    patched = checks.model(model).clone()
    patched.set_option("sampler_cfg_function", PerpNegCFG(empty, float(checks.number(neg_scale, "neg_scale"))))
    return (patched,)


@node("DifferentialDiffusion", display_name="Differential Diffusion", category="_for_testing",
      python_module="comfy_extras.nodes_differential_diffusion", experimental=True,
      inputs=[Input("model", "MODEL"),
              Float("strength", default=1.0, min=0.0, max=1.0, step=0.01, optional=True)],
      outputs=[Output("MODEL")])
def differential_diffusion(model: Any, strength: float = 1.0) -> tuple[Any]:
    """The inpainting mask thresholded by the run's progress at each step (Levin & Fried 2023)."""
    from comfy_core.model_patches.differential_diffusion import DifferentialDiffusion

    patched = checks.model(model).clone()
    patched.set_option("denoise_mask_function", DifferentialDiffusion(float(checks.number(strength, "strength"))))
    return (patched,)


@node("FreSca", display_name="FreSca", category="_for_testing", python_module="comfy_extras.nodes_fresca",
      experimental=True, description="Applies frequency-dependent scaling to the guidance",
      inputs=[Input("model", "MODEL"),
              Float("scale_low", default=1.0, min=0, max=10, step=0.01,
                    tooltip="Scaling factor for low-frequency components"),
              Float("scale_high", default=1.25, min=0, max=10, step=0.01,
                    tooltip="Scaling factor for high-frequency components"),
              Int("freq_cutoff", default=20, min=1, max=10000, step=1,
                  tooltip="Number of frequency indices around center to consider as low-frequency")],
      outputs=[Output("MODEL")])
def fresca(model: Any, scale_low: float, scale_high: float, freq_cutoff: int) -> tuple[Any]:
    """The guidance's low and high frequencies scaled apart (Huang et al. 2025)."""
    from comfy_core.model_patches.fresca import FreSca

    hook = FreSca(float(checks.number(scale_low, "scale_low")), float(checks.number(scale_high, "scale_high")),
                  checks.integer(freq_cutoff, "freq_cutoff", 1))
    patched = checks.model(model).clone()
    patched.add_option_function("sampler_pre_cfg_function", hook)
    return (patched,)
