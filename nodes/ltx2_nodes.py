"""LTX-2 / 2.3 nodes of ComfyUI's `comfy_extras/nodes_lt.py` (today's V3 schemas) not in
nodes/ltxv_nodes.py; written here:

- GetICLoRAParameters: the IC-LoRA parameters LTXVAddGuide reads (`reference_downscale_factor`)
  from the safetensors metadata a LoRA loader attached to the MODEL (`lora_metadata`, set by
  LoraLoader / LoraLoaderModelOnly): the first metadata key ending in `reference_downscale_factor`,
  rounded, at least 1; 1 when there is none or it is not a number (ComfyUI's fallback).
- LTXVDualCFGGuider: separate CFG scales for the video and the audio of an audio-video latent
  (`comfy_core/sampling/nested_cfg.py`).
- LTXVReferenceAudio (ID-LoRA speaker identity): the reference AUDIO encoded by the LTX audio VAE
  (at the VAE's input rate) and patchified to tokens `[B, T, 8 * 16]`, set as `ref_audio`
  `{"tokens": ...}` on both conditionings (the DiT prepends them to the audio stream:
  comfy_core/families/ltx2/dit.py); the MODEL gets a post-CFG function that, while
  `sigma_end <= sigma <= sigma_start`, runs the positive once more without the reference and adds
  `(cond - no_reference) * identity_guidance_scale` (0: no extra pass).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from graph.v3_schema import Float, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_lt"
IC_LORA_PARAMETERS = "IC_LORA_PARAMETERS"
DOWNSCALE_KEY = "reference_downscale_factor"


def ic_lora_parameters(metadata: Mapping[str, Any] | None) -> dict[str, int]:
    """`{"reference_downscale_factor": n}` from a LoRA file's metadata (see the module doc)."""
    factor = 1
    if metadata:
        value = next((v for k, v in metadata.items() if str(k).endswith(DOWNSCALE_KEY)), None)
        try:
            factor = max(1, round(float(value))) if value is not None else 1
        except (TypeError, ValueError):
            factor = 1
    return {DOWNSCALE_KEY: factor}


@v3_node("GetICLoRAParameters", display_name="Get IC-LoRA Parameters", category="model/conditioning/ltxv",
         python_module=MODULE,
         description="Extracts IC-LoRA parameters from the safetensors metadata of a LoRA-loaded model and outputs "
                     "them for LTXVAddGuide (eg. reference_downscale_factor).",
         search_aliases=["ic-lora", "ic lora", "iclora", "downscale factor", "reference downscale"],
         inputs=[Socket("iclora_model", "MODEL",
                        tooltip="Direct output from a LoRA Loader for the specific IC-LoRA from which to extract the "
                                "metadata.")],
         outputs=[Output(IC_LORA_PARAMETERS, "iclora_parameters",
                         tooltip="IC-LoRA parameters extracted from the LoRA metadata (eg. reference_downscale_factor). "
                                 "Connect to LTXVAddGuide if the LoRA requires special handling of the guides.")])
def get_ic_lora_parameters(iclora_model: Any) -> tuple[dict]:
    model = checks.model(iclora_model, "iclora_model")
    return (ic_lora_parameters(getattr(model, "attachments", {}).get("lora_metadata")),)


@v3_node("LTXVDualCFGGuider", display_name="LTXV Dual CFG Guider", category="model/sampling/guiders",
         python_module=MODULE,
         description="Separate CFG scales for the video and audio modalities of a packed LTXV-AV latent.",
         inputs=[Socket("model", "MODEL"), Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"),
                 Float("video_cfg", default=3.0, min=0.0, max=100.0, step=0.1, round=0.01),
                 Float("audio_cfg", default=7.0, min=0.0, max=100.0, step=0.1, round=0.01)],
         outputs=[Output("GUIDER")])
def ltxv_dual_cfg_guider(model: Any, positive: Any, negative: Any, video_cfg: float, audio_cfg: float) -> tuple[Any]:
    from comfy_core.sampling.nested_cfg import NestedDualCFGGuider

    guider = NestedDualCFGGuider(checks.model(model))
    guider.set_conds(checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"))
    guider.set_cfg(checks.number(video_cfg, "video_cfg", 0.0, 100.0), checks.number(audio_cfg, "audio_cfg", 0.0, 100.0))
    return (guider,)


@dataclass(frozen=True)
class IdentityGuidance:
    """LTXVReferenceAudio's `sampler_post_cfg_function` (see the module doc)."""

    scale: float
    sigma_start: float
    sigma_end: float

    def __call__(self, args: dict) -> Any:
        from comfy_core.sampling import cond_batch

        guided = args["denoised"]
        if self.scale == 0:
            return guided
        sigma = float(args["sigma"][0])
        if sigma > self.sigma_start or sigma < self.sigma_end:
            return guided
        without = []
        for entry in args["cond"]:
            entry = dict(entry)
            entry["model_conds"] = {k: v for k, v in entry.get("model_conds", {}).items() if k != "ref_audio"}
            without.append(entry)
        (no_reference,) = cond_batch.calc_cond_batch_in_force()(args["model"], [without], args["input"],
                                                                 args["sigma"], dict(args["model_options"]))
        return guided + (args["cond_denoised"] - no_reference) * self.scale

    def cache_signature(self) -> tuple:
        return ("IdentityGuidance", self.scale, self.sigma_start, self.sigma_end)


def reference_audio_tokens(audio_vae: Any, reference_audio: Any) -> Any:
    """The reference AUDIO through the LTX audio VAE, `[B, 8, T, 16]` -> tokens `[B, T, 128]`."""
    from nodes.ltx_audio_nodes import _audio_vae, encode_audio

    latent = encode_audio(_audio_vae(audio_vae), reference_audio, "reference_audio")["samples"]
    b, c, t, f = latent.shape
    return latent.permute(0, 2, 1, 3).reshape(b, t, c * f)


@v3_node("LTXVReferenceAudio", display_name="LTXV Reference Audio (ID-LoRA)", category="model/conditioning/ltxv",
         python_module=MODULE,
         description="Set reference audio for ID-LoRA speaker identity transfer. Encodes a reference audio clip into "
                     "the conditioning and optionally patches the model with identity guidance (extra forward pass "
                     "without reference, amplifying the speaker identity effect).",
         inputs=[Socket("model", "MODEL"), Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"),
                 Socket("reference_audio", "AUDIO",
                        tooltip="Reference audio clip whose speaker identity to transfer. ~5 seconds recommended "
                                "(training duration). Shorter or longer clips may degrade voice identity transfer."),
                 Socket("audio_vae", "VAE", tooltip="LTXV Audio VAE for encoding.", display_name="Audio VAE"),
                 Float("identity_guidance_scale", default=3.0, min=0.0, max=100.0, step=0.01, round=0.01,
                       tooltip="Strength of identity guidance. Runs an extra forward pass without reference each step "
                               "to amplify speaker identity. Set to 0 to disable (no extra pass)."),
                 Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001, advanced=True,
                       tooltip="Start of the sigma range where identity guidance is active."),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001, advanced=True,
                       tooltip="End of the sigma range where identity guidance is active.")],
         outputs=[Output("MODEL"), Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def ltxv_reference_audio(model: Any, positive: Any, negative: Any, reference_audio: Any, audio_vae: Any,
                         identity_guidance_scale: float, start_percent: float, end_percent: float) -> tuple:
    model = checks.model(model)
    positive = checks.conditioning(positive, "positive")
    negative = checks.conditioning(negative, "negative")
    scale = checks.number(identity_guidance_scale, "identity_guidance_scale", 0.0, 100.0)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    if reference_audio is None:
        raise NodeInputError("reference_audio", "AUDIO", "None")
    ref = {"tokens": reference_audio_tokens(audio_vae, reference_audio)}
    positive = [[t, {**d, "ref_audio": ref}] for t, d in positive]
    negative = [[t, {**d, "ref_audio": ref}] for t, d in negative]
    sampling = model.get_model_object("model_sampling")
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function",
                                IdentityGuidance(scale, float(sampling.percent_to_sigma(start)),
                                                 float(sampling.percent_to_sigma(end))))
    return (patched, positive, negative)
