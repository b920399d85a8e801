"""TextGenerate (ComfyUI's comfy_extras/nodes_textgen.py, 2026; "Generate Text"): prompt writing with
the loaded LLM text encoder. The prompt goes through the CLIP's tokenizer as ComfyUI passes it
(`min_length=1`, the `thinking`, `skip_template` = not `use_default_template` and `system_prompt`
keywords, which each family's tokenizer reads or not: Z-Image's applies its chat template either
way, as ComfyUI's does), the encoder's tower generates (comfy_core/text_encoders/generate.py:
greedy when `sampling_mode` is "off", else seeded sampling with temperature, top-k, top-p, min-p,
repetition and presence penalties), and the ids are decoded without special tokens.

Outputs: the text and the reasoning. A `</think>` splits them; text that opens with `<think>` and
never closes it (max_length cut it short) is all reasoning; otherwise there is no reasoning.

An image goes into a Qwen2.5-VL prompt (Qwen-Image's encoder: its vision tower, M-RoPE positions;
ComfyUI's `Qwen25_7BVLIModel.generate`). Differences from ComfyUI, by house rule (bad input is an
error, never silently ignored): an image, video or audio given to an encoder that does not read it
is a node error (ComfyUI's Qwen3 tokenizer drops them); a CLIP whose encoder cannot generate (CLIP-L, T5) is a node error naming the input.
`mtp` (speculative decoding with a multi-token-prediction head) has no effect: none of our encoders
has MTP weights, and ComfyUI documents it as having no effect then.
The LTX-2 prompt variant (`TextGenerateLTX2Prompt`) is nodes/text_generate_ltx2.py (Gemma 3, which
LTX-2's text encoder loader gives, generates).
"""
from __future__ import annotations

from typing import Any

from graph.context import current
from graph.v3_schema import Boolean, Combo, ComboOption, DynamicCombo, Float, Int, Output, Socket, String, v3_node
from nodes.errors import NodeInputError, describe
import nodes.checks as checks

# torch and comfy_core are imported inside the functions that run: registering this node and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_textgen"
MTP_CHOICES = ["auto", "off", "2", "3", "4", "5"]
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

SAMPLING_ON = ComboOption("on", (
    Float("temperature", default=0.7, min=0.01, max=2.0, step=0.000001),
    Int("top_k", default=64, min=0, max=1000),
    Float("top_p", default=0.95, min=0.0, max=1.0, step=0.01),
    Float("min_p", default=0.05, min=0.0, max=1.0, step=0.01),
    Float("repetition_penalty", default=1.05, min=0.0, max=5.0, step=0.01),
    Int("seed", default=0, min=0, max=0xffffffffffffffff),
    Float("presence_penalty", default=0.0, min=0.0, max=5.0, step=0.01, optional=True),
))
SAMPLING_OFF = ComboOption("off", ())


def split_reasoning(generated: str) -> tuple[str, str]:
    """(answer, reasoning) of generated text: the part before the first `</think>` is reasoning
    (its `<think>` removed); without a close, text opening with `<think>` is all reasoning, any
    other text all answer. Both stripped."""
    reasoning, close, answer = generated.partition(THINK_CLOSE)
    if not close and not reasoning.lstrip().startswith(THINK_OPEN):
        reasoning, answer = "", reasoning
    return answer.strip(), reasoning.replace(THINK_OPEN, "", 1).strip()


def sampling_options(mode: dict) -> SamplingOptions:
    """The node's `sampling_mode` value -> SamplingOptions, with ComfyUI's defaults for what is absent."""
    from comfy_core.text_encoders.generate import GenerationError, SamplingOptions
    try:
        return SamplingOptions(
            do_sample=mode.get("sampling_mode") == "on", temperature=mode.get("temperature", 1.0),
            top_k=mode.get("top_k", 50), top_p=mode.get("top_p", 1.0), min_p=mode.get("min_p", 0.0),
            repetition_penalty=mode.get("repetition_penalty", 1.0),
            presence_penalty=mode.get("presence_penalty", 0.0), seed=mode.get("seed"))
    except GenerationError as exc:
        raise NodeInputError("sampling_mode", "sampling options a generation can use", str(exc)) from exc


def _check_encoder(clip: Any, **media: Any) -> None:
    """The CLIP's main tower must generate; media it does not read (its `generation_media`:
    Qwen2.5-VL reads images, the others text only) are refused."""
    from comfy_core.text_encoders.generate import GenerationError, generating_encoder
    try:
        slot, tower = generating_encoder(clip.cond_stage_model)
    except GenerationError as exc:
        raise NodeInputError("clip", "a CLIP whose text encoder can generate text (an LLM such as Qwen3)",
                             str(exc)) from exc
    readable = tuple(getattr(tower, "generation_media", ()))
    for name, value in media.items():
        if value is not None and name not in readable:
            reads = "text only" if not readable else f"text and {', '.join(readable)} only"
            raise NodeInputError(name, f"nothing: the {slot!r} text encoder ({type(tower).__name__}) reads {reads}",
                                 describe(value))


# TextGenerate's inputs and outputs (TextGenerateLTX2Prompt, nodes/text_generate_ltx2.py, has the same).
TEXT_GENERATE_INPUTS = [
    Socket("clip", "CLIP"),
    String("prompt", default="", multiline=True, dynamicPrompts=True),
    Socket("image", "IMAGE", optional=True),
    Socket("video", "IMAGE", optional=True,
           tooltip="Video frames as image batch. Assumed to be 24 FPS; subsampled to 1 FPS internally."),
    Socket("audio", "AUDIO", optional=True),
    Int("max_length", default=512, min=1, max=32768),
    DynamicCombo("sampling_mode", (SAMPLING_ON, SAMPLING_OFF), display_name="Sampling Mode"),
    Boolean("thinking", default=False, optional=True,
            tooltip="Operate in thinking mode if the model supports it."),
    Boolean("use_default_template", default=True, optional=True, advanced=True,
            tooltip="Use the built in system prompt/template if the model has one."),
    Combo("mtp", MTP_CHOICES, default="auto", optional=True,
          tooltip="Speculative decoding with the checkpoint's multi-token-prediction head. No effect without "
                  "MTP weights. auto adapts the draft depth; 2-5 pins it. Sampled output stays correctly "
                  "distributed but differs from non-MTP output for the same seed."),
    String("system_prompt", optional=True, forceInput=True,
           tooltip="Replaces the system prompt in the model's chat template. Ignored when the default "
                   "template is not used."),
]
TEXT_GENERATE_OUTPUTS = [Output("STRING", "generated_text"), Output("STRING", "thinking")]


@v3_node("TextGenerate", display_name="Generate Text", category="text", python_module=MODULE,
         search_aliases=["LLM", "gemma"], inputs=TEXT_GENERATE_INPUTS, outputs=TEXT_GENERATE_OUTPUTS)
def text_generate(clip: Any, prompt: str, max_length: int, sampling_mode: dict, image: Any = None,
                  thinking: bool = False, use_default_template: bool = True, video: Any = None, audio: Any = None,
                  mtp: str = "auto", system_prompt: str = "") -> tuple[str, str]:
    """(generated text, reasoning) written by the CLIP's LLM for `prompt`."""
    from comfy_core.text_encoders.generate import GenerationError, generate_with_clip
    clip = checks.clip(clip, encoders=True)
    prompt = checks.text(prompt, "prompt")
    system_prompt = checks.text(system_prompt, "system_prompt")
    max_length = checks.integer(max_length, "max_length", 1, 32768)
    if mtp not in MTP_CHOICES:
        raise NodeInputError("mtp", f"one of {MTP_CHOICES}", repr(mtp))
    options = sampling_options(sampling_mode)
    _check_encoder(clip, image=image, video=video, audio=audio)
    try:
        tokens = clip.tokenize(prompt, image=image, skip_template=not use_default_template, min_length=1,
                               thinking=bool(thinking), video=video, audio=audio, system_prompt=system_prompt)
        ctx = current()
        ids = generate_with_clip(clip, tokens, max_length, options, ctx.progress if ctx is not None else None)
    except GenerationError as exc:
        raise NodeInputError("clip", "a CLIP whose text encoder can generate text (an LLM such as Qwen3)",
                             str(exc)) from exc
    return split_reasoning(clip.tokenizer.decode(ids, skip_special_tokens=True))
