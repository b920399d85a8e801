"""MiniMax Music 3's nodes with today's ComfyUI names, schemas and semantics
(`comfy_extras/nodes_minimax_music.py`); written here.

- MiniMaxMusic3TextEncode: the caption and lyrics through the MiniMax Music 3 CLIP (its AR stage,
  comfy_core/families/minimax_music3/clip.py), generating at most `round(max_duration x 25)` frames
  (1 .. 9,000) with `seed`, `cfg_scale`, `top_k`; every entry gets `conditioning_scale` ones
  `[B, 1, 1]`; the second output is the generated length in seconds (frames / 25), which the
  template feeds to EmptyMiniMaxMusic3LatentAudio.
- EmptyMiniMaxMusic3LatentAudio: zeros `[B, 128, latent_length(frames)]` for
  `round(seconds x 25)` frames (1 .. 9,000; `latent_length` = `int(frames x 44100 / 24000 x 960 /
  512)`), `type` "audio", `downscale_ratio_temporal` 512.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_minimax_music"
SEED_MAX = 0xFFFFFFFFFFFFFFFF
FRAMES_PER_SECOND = 25
MAX_AUDIO_FRAMES = 9000
CHANNELS = 128
CFG_SCALE, TOP_K, C0_VOCAB_SIZE = 1.5, 50, 16384
MAX_SECONDS = MAX_AUDIO_FRAMES / FRAMES_PER_SECOND


def _frames(seconds: float) -> int:
    return min(MAX_AUDIO_FRAMES, max(1, round(seconds * FRAMES_PER_SECOND)))


def _music_clip(clip: Any) -> Any:
    clip = checks.clip(clip)
    if type(getattr(clip, "cond_stage_model", None)).__name__ != "MiniMaxMusic3TEModel":
        raise NodeInputError("clip", "MiniMax Music 3's text encoder (CLIPLoader with "
                             "minimax_music3_text_encoder_*.safetensors)", describe(clip))
    return clip


@v3_node("MiniMaxMusic3TextEncode", display_name="MiniMax Music3 Text Encode",
         category="model/conditioning/minimax music", python_module=MODULE,
         description="Uses a MiniMax Music3 CLIP model to generate the acoustic conditioning sequence.",
         inputs=[Socket("clip", "CLIP"),
                 String("caption", multiline=True, dynamicPrompts=True),
                 String("lyrics", multiline=True, dynamicPrompts=True),
                 Int("seed", default=0, min=0, max=SEED_MAX, control_after_generate=True),
                 Float("max_duration", default=120.0, min=0.04, max=MAX_SECONDS, step=0.04,
                       tooltip="Maximum duration in seconds; the model can end the song earlier."),
                 Float("cfg_scale", default=CFG_SCALE, min=0.0, max=100.0, step=0.1, round=0.01, advanced=True),
                 Int("top_k", default=TOP_K, min=1, max=C0_VOCAB_SIZE, advanced=True)],
         outputs=[Output("CONDITIONING"), Output("FLOAT", "seconds")])
def minimax_music3_text_encode(clip: Any, caption: str, lyrics: str, seed: int, max_duration: float,
                               cfg_scale: float, top_k: int) -> tuple[list, float]:
    import torch

    clip = _music_clip(clip)
    frames = _frames(checks.number(max_duration, "max_duration", 0.04, MAX_SECONDS))
    tokens = clip.tokenize(checks.text(caption, "caption"), lyrics=checks.text(lyrics, "lyrics"),
                           seed=checks.integer(seed, "seed", 0, SEED_MAX), max_audio_frames=frames,
                           cfg_scale=checks.number(cfg_scale, "cfg_scale", 0.0, 100.0),
                           top_k=checks.integer(top_k, "top_k", 1, C0_VOCAB_SIZE))
    conditioning = clip.encode_from_tokens_scheduled(tokens)
    for entry in conditioning:
        hidden = entry[0]
        entry[1]["conditioning_scale"] = torch.ones((hidden.shape[0], 1, 1), device=hidden.device, dtype=hidden.dtype)
    return conditioning, conditioning[0][0].shape[1] / FRAMES_PER_SECOND


@v3_node("EmptyMiniMaxMusic3LatentAudio", display_name="Empty MiniMax Music3 Latent Audio",
         category="model/latent/minimax music", python_module=MODULE,
         description="Creates an empty MiniMax Music3 audio latent for the requested duration.",
         inputs=[Float("seconds", default=120.0, min=0.04, max=MAX_SECONDS, step=0.04),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_minimax_music3_latent_audio(seconds: float, batch_size: int) -> tuple[dict]:
    import torch

    from comfy_core.families.minimax_music3.dit import latent_length

    frames = _frames(checks.number(seconds, "seconds", 0.04, MAX_SECONDS))
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    latent = torch.zeros((batch_size, CHANNELS, latent_length(frames)))
    return ({"samples": latent, "type": "audio", "downscale_ratio_temporal": 512},)
