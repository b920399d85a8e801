"""The audio-video LATENT nodes of ComfyUI's `comfy_extras/nodes_lt.py` (V3 schemas as today's
ComfyUI declares them); written here. A joint latent is a nested LATENT: `samples` a NestedTensor
`[video, audio]` (comfy_core/latent/nested.py), `noise_mask` one too when either part has a mask.

- LTXVConcatAVLatent: a video LATENT and an audio LATENT -> the nested one (other keys of both
  kept, the audio's winning). A part without a noise mask gets ones (denoised whole) when the
  other has one. Given a nested latent as the video, its video is kept and the audio replaced;
  the new audio is trimmed or zero-padded along the one axis (2 or later) on which it differs
  from the audio it replaces, the padded tail marked for denoising.
- LTXVSeparateAVLatent: a nested LATENT -> its video and audio LATENTs (other keys copied to
  both, the noise mask split alike).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_lt"
CATEGORY = "model/latent/ltxv"
_ANY_MODEL = "(any AV model, e.g. LTXV or MiniMax H3)"


def _tensor_latent(value: Any, name: str) -> Any:
    if not isinstance(value, dict) or not _is_tensor(value.get("samples")):
        raise NodeInputError(name, "a LATENT ({'samples': tensor})", describe(value))
    return value["samples"]


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def fit_audio(reference: Any, audio: Any, noise_mask: Any) -> tuple[Any, Any]:
    """`audio` (and its mask, resized to it first) trimmed or zero-padded to `reference`'s length
    on the one axis (2 or later) where their shapes differ; padding is marked 1 in the mask."""
    import torch

    from comfy_core.sampling.guider import prepare_mask

    if audio.ndim != reference.ndim:
        raise NodeInputError("audio_latent", f"an audio latent of {reference.ndim} axes like {tuple(reference.shape)}",
                             describe(audio))
    dims = [i for i in range(reference.ndim) if reference.shape[i] != audio.shape[i]]
    if not dims:
        return audio, noise_mask
    if len(dims) > 1 or dims[0] < 2:
        raise NodeInputError("audio_latent", f"an audio latent that differs from {tuple(reference.shape)} on one "
                                             f"axis after the channels", describe(audio))
    dim, length = dims[0], reference.shape[dims[0]]
    if noise_mask is not None:  # masks keep their own shape until sampling resizes them
        noise_mask = prepare_mask(noise_mask, audio.shape, audio.device)
    if audio.shape[dim] > length:
        audio = audio.narrow(dim, 0, length)
        return audio, None if noise_mask is None else noise_mask.narrow(dim, 0, length)
    pad_shape = list(audio.shape)
    pad_shape[dim] = length - audio.shape[dim]
    pad = audio.new_zeros(pad_shape)
    audio = torch.cat([audio, pad], dim=dim)
    if noise_mask is not None:
        noise_mask = torch.cat([noise_mask, torch.ones_like(pad)], dim=dim)
    return audio, noise_mask


@v3_node("LTXVConcatAVLatent", display_name="Concat AV Latent", category=CATEGORY, python_module=MODULE,
         description=f"Merge a video latent and an audio latent into a joint AV latent {_ANY_MODEL}.",
         inputs=[Socket("video_latent", "LATENT"), Socket("audio_latent", "LATENT")],
         outputs=[Output("LATENT", "latent")])
def ltxv_concat_av_latent(video_latent: dict, audio_latent: dict) -> tuple[dict]:
    import torch

    from comfy_core.latent.nested import NestedTensor, is_nested

    video = checks.latent(video_latent, "video_latent", nested=True)
    audio = _tensor_latent(audio_latent, "audio_latent")
    video_mask, audio_mask = video_latent.get("noise_mask"), audio_latent.get("noise_mask")
    if is_nested(video):  # already joint: keep its video, put this audio in place of its own
        streams = video.unbind()
        if len(streams) < 2:
            raise NodeInputError("video_latent", "a video LATENT or a joint [video, audio] one", describe(video))
        video = streams[0]
        if is_nested(video_mask):
            video_mask = video_mask.unbind()[0]
        audio, audio_mask = fit_audio(streams[1], audio, audio_mask)
    out = {**video_latent, **audio_latent}
    if video_mask is not None or audio_mask is not None:
        video_mask = torch.ones_like(video) if video_mask is None else video_mask
        audio_mask = torch.ones_like(audio) if audio_mask is None else audio_mask
        out["noise_mask"] = NestedTensor([video_mask, audio_mask])
    out["samples"] = NestedTensor([video, audio])
    return (out,)


@v3_node("LTXVSeparateAVLatent", display_name="Separate AV Latent", category=CATEGORY, python_module=MODULE,
         description=f"Split a joint AV latent into its video and audio latents {_ANY_MODEL}.",
         inputs=[Socket("av_latent", "LATENT")],
         outputs=[Output("LATENT", "video_latent"), Output("LATENT", "audio_latent")])
def ltxv_separate_av_latent(av_latent: dict) -> tuple[dict, dict]:
    from comfy_core.latent.nested import is_nested

    samples = checks.latent(av_latent, "av_latent", nested=True)
    if not is_nested(samples) or len(samples.unbind()) < 2:
        raise NodeInputError("av_latent", "a joint AV LATENT (samples: a NestedTensor [video, audio])",
                             describe(samples))
    parts = samples.unbind()
    video, audio = dict(av_latent), dict(av_latent)
    video["samples"], audio["samples"] = parts[0], parts[1]
    masks = av_latent.get("noise_mask")
    if masks is not None:
        if not is_nested(masks) or len(masks.unbind()) < 2:
            raise NodeInputError("av_latent", "a noise_mask nested like the samples", describe(masks))
        video["noise_mask"], audio["noise_mask"] = masks.unbind()[0], masks.unbind()[1]
    return video, audio
