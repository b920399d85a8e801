"""ACE-Step 1.5's nodes with today's ComfyUI names, schemas and semantics (`comfy_extras/nodes_ace.py`):

- TextEncodeAceStepAudio1.5: the caption (`tags`), lyrics and song metadata through the ACE-Step
  1.5 text encoders (comfy_core/families/ace_step15/clip.py: the 0.6B's caption states, the lyric
  embeddings and, with `generate_audio_codes`, the LM's audio codes sampled with `seed`,
  `cfg_scale`, `temperature`, `top_p`, `top_k`, `min_p`); `timesignature` is passed as a number.
- EmptyAceStep1.5LatentAudio: zeros `[B, 64, round(seconds * 48000 / 1920)]`, `type` "audio"
  (25 latent frames a second).
- ReferenceTimbreAudio ("Reference Audio"): appends a latent to the conditioning's
  `reference_audio_timbre_latents` (the network's timbre reference; the last one counts).

ACE-Step 1 (comfy_core/families/ace_step/):

- TextEncodeAceStepAudio: the tags through UMT5-base and the lyric token ids
  (`conditioning_lyrics`), `lyrics_strength` set on every entry (it scales the lyric states);
- EmptyAceStepLatentAudio ("Empty Ace Step 1.0 Latent Audio"): zeros
  `[B, 8, 16, int(seconds * 44100 / 512 / 8)]`, `type` "audio".
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_ace"
SAMPLE_RATE, SAMPLES_PER_FRAME, CHANNELS = 48000, 1920, 64
SEED_MAX = 0xFFFFFFFFFFFFFFFF
TIME_SIGNATURES = ["2", "3", "4", "6"]
LANGUAGES = ["ar", "az", "bg", "bn", "ca", "cs", "da", "de", "el", "en", "es", "fa", "fi", "fr", "he", "hi", "hr",
             "ht", "hu", "id", "is", "it", "ja", "ko", "la", "lt", "ms", "ne", "nl", "no", "pa", "pl", "pt", "ro", "ru",
             "sa", "sk", "sr", "sv", "sw", "ta", "te", "th", "tl", "tr", "uk", "ur", "vi", "yue", "zh", "unknown"]
ROOTS = ["C", "C#", "Db", "D", "D#", "Eb", "E", "F", "F#", "Gb", "G", "G#", "Ab", "A", "A#", "Bb", "B"]
KEYSCALES = [f"{root} {quality}" for quality in ("major", "minor") for root in ROOTS]
CODES_TOOLTIP = ("Enable the LLM that generates audio codes. This can be slow but will increase the quality of the "
                 "generated audio. Turn this off if you are giving the model an audio reference.")


def _ace_clip(clip: Any) -> Any:
    clip = checks.clip(clip)
    model = getattr(clip, "cond_stage_model", None)
    if type(model).__name__ != "ACE15TEModel":
        raise NodeInputError("clip", "ACE-Step 1.5's text encoders (DualCLIPLoader type 'ace' with qwen_0.6b_ace15 "
                             "and the 1.7B / 4B LM, or its all-in-one checkpoint)", describe(clip))
    return clip


@v3_node("TextEncodeAceStepAudio1.5", category="conditioning", python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("tags", multiline=True, dynamicPrompts=True),
                 String("lyrics", multiline=True, dynamicPrompts=True),
                 Int("seed", default=0, min=0, max=SEED_MAX, control_after_generate=True),
                 Int("bpm", default=120, min=10, max=300),
                 Float("duration", default=120.0, min=0.0, max=2000.0, step=0.1),
                 Combo("timesignature", TIME_SIGNATURES),
                 Combo("language", LANGUAGES, default="en"),
                 Combo("keyscale", KEYSCALES),
                 Boolean("generate_audio_codes", default=True, tooltip=CODES_TOOLTIP, advanced=True),
                 Float("cfg_scale", default=2.0, min=0.0, max=100.0, step=0.1, advanced=True),
                 Float("temperature", default=0.85, min=0.0, max=2.0, step=0.01, advanced=True),
                 Float("top_p", default=0.9, min=0.0, max=2000.0, step=0.01, advanced=True),
                 Int("top_k", default=0, min=0, max=100, advanced=True),
                 Float("min_p", default=0.000, min=0.0, max=1.0, step=0.001, advanced=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_ace_step15(clip: Any, tags: str, lyrics: str, seed: int, bpm: int, duration: float,
                           timesignature: str, language: str, keyscale: str, generate_audio_codes: bool,
                           cfg_scale: float, temperature: float, top_p: float, top_k: int, min_p: float) -> tuple[list]:
    clip = _ace_clip(clip)
    options = dict(
        lyrics=checks.text(lyrics, "lyrics"), bpm=checks.integer(bpm, "bpm", 10, 300),
        duration=checks.number(duration, "duration", 0.0, 2000.0),
        timesignature=int(checks.choice(timesignature, TIME_SIGNATURES, "timesignature")),
        language=checks.choice(language, LANGUAGES, "language"), keyscale=checks.choice(keyscale, KEYSCALES, "keyscale"),
        seed=checks.integer(seed, "seed", 0, SEED_MAX), generate_audio_codes=bool(generate_audio_codes),
        cfg_scale=checks.number(cfg_scale, "cfg_scale", 0.0, 100.0),
        temperature=checks.number(temperature, "temperature", 0.0, 2.0),
        top_p=checks.number(top_p, "top_p", 0.0, 2000.0), top_k=checks.integer(top_k, "top_k", 0, 100),
        min_p=checks.number(min_p, "min_p", 0.0, 1.0))
    tokens = clip.tokenize(checks.text(tags, "tags"), **options)
    return (clip.encode_from_tokens_scheduled(tokens),)


@v3_node("EmptyAceStep1.5LatentAudio", display_name="Empty Ace Step 1.5 Latent Audio", category="latent/audio",
         python_module=MODULE,
         inputs=[Float("seconds", default=120.0, min=1.0, max=1000.0, step=0.01),
                 Int("batch_size", default=1, min=1, max=4096, tooltip="The number of latent images in the batch.")],
         outputs=[Output("LATENT")])
def empty_ace_step15_latent_audio(seconds: float, batch_size: int) -> tuple[dict]:
    import torch

    seconds = checks.number(seconds, "seconds", 1.0, 1000.0)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    length = round(seconds * SAMPLE_RATE / SAMPLES_PER_FRAME)
    return ({"samples": torch.zeros([batch_size, CHANNELS, length]), "type": "audio"},)


@v3_node("ReferenceTimbreAudio", display_name="Reference Audio", category="advanced/conditioning/audio",
         python_module=MODULE, experimental=True, description="This node sets the reference audio for ace step 1.5",
         inputs=[Socket("conditioning", "CONDITIONING"), Socket("latent", "LATENT", optional=True)],
         outputs=[Output("CONDITIONING")])
def reference_timbre_audio(conditioning: list, latent: dict | None = None) -> tuple[list]:
    conditioning = checks.conditioning(conditioning)
    if latent is None:
        return (conditioning,)
    samples = checks.latent(latent, "latent", ndims=(3,))
    out = []
    for cond, options in conditioning:
        options = dict(options)
        options["reference_audio_timbre_latents"] = list(options.get("reference_audio_timbre_latents", [])) + [samples]
        out.append([cond, options])
    return (out,)


def _ace1_clip(clip: Any) -> Any:
    clip = checks.clip(clip)
    if type(getattr(clip, "cond_stage_model", None)).__name__ != "AceT5Model":
        raise NodeInputError("clip", "ACE-Step 1's text encoders (the CLIP of ace_step_v1_3.5b.safetensors)",
                             describe(clip))
    return clip


@v3_node("TextEncodeAceStepAudio", category="conditioning", python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("tags", multiline=True, dynamicPrompts=True),
                 String("lyrics", multiline=True, dynamicPrompts=True),
                 Float("lyrics_strength", default=1.0, min=0.0, max=10.0, step=0.01)],
         outputs=[Output("CONDITIONING")])
def text_encode_ace_step(clip: Any, tags: str, lyrics: str, lyrics_strength: float) -> tuple[list]:
    from nodes.flux_nodes import set_values

    clip = _ace1_clip(clip)
    tokens = clip.tokenize(checks.text(tags, "tags"), lyrics=checks.text(lyrics, "lyrics"))
    strength = checks.number(lyrics_strength, "lyrics_strength", 0.0, 10.0)
    return (set_values(clip.encode_from_tokens_scheduled(tokens), {"lyrics_strength": strength}),)


@v3_node("EmptyAceStepLatentAudio", display_name="Empty Ace Step 1.0 Latent Audio", category="latent/audio",
         python_module=MODULE,
         inputs=[Float("seconds", default=120.0, min=1.0, max=1000.0, step=0.1),
                 Int("batch_size", default=1, min=1, max=4096, tooltip="The number of latent images in the batch.")],
         outputs=[Output("LATENT")])
def empty_ace_step_latent_audio(seconds: float, batch_size: int) -> tuple[dict]:
    import torch

    seconds = checks.number(seconds, "seconds", 1.0, 1000.0)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    length = int(seconds * 44100 / 512 / 8)
    return ({"samples": torch.zeros([batch_size, 8, 16, length]), "type": "audio"},)
