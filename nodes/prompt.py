"""AUTOMATIC1111 prompt nodes: CLIPTextEncodeWeighted (+ SDXL variant) and ApplyEmbedding.

Thin: the language, chunking, emphasis and embeddings live in `comfy_core.prompt`.

- `steps` and `scheduler` must match the KSampler the conditioning goes to: webui's prompt
  editing switches at a step number, and ComfyUI's conditioning switches at a sigma, so the node
  computes the sigma between the two steps for that step count and scheduler
  (`comfy_core.prompt.timeline`). For webui's second-order samplers (Heun, DPM2, DPM++ 2S a,
  DPM++ SDE, Restart) webui doubles the step count; set `steps` accordingly to match it.
- `negative`: webui never AND-splits or weight-strips the negative prompt, and on SDXL an empty
  negative prompt is all zeros.
- `folder_embeddings`: as webui, every embedding in `models/embeddings` that fits the model is
  matched by name in the prompt; `embedding:name` (ComfyUI's syntax) always works.
- Clip skip is `CLIPSetLastLayer` on the CLIP, applied as webui does per family: SD1 uses that
  layer through the final layer norm; SD2 (penultimate, normed) and SDXL (penultimate of CLIP-L
  and CLIP-G, not normed) ignore it, as webui does.
- Text is cleaned as webui's tokenizers clean it before BPE (ftfy: curly quotes, HTML entities,
  ligatures, full-width letters; `comfy_core.prompt.webui_tokenizer`); CLIPTextEncode does not.
- A prompt that cannot be encoded (e.g. `(a:1.2.3)`) fails validation on this node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.native import MAX_RESOLUTION, Boolean, Combo, Input, Int, Output, String, node
import nodes.checks as checks
from nodes._names import DEFAULT_EMPHASIS, EMBEDDINGS_KIND, EMPHASIS_MODES, embedding_files, scheduler_names
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    from comfy_core.prompt.conditioning import PromptOptions

# comfy_core.prompt is imported inside the functions that run: most of it imports torch, and
# registering these nodes and rendering /object_info must not (server start-up, nodes/_names.py).


def list_embedding_files(env: Environment | None) -> list[str]:
    """ApplyEmbedding's combo: embedding files in the embeddings folders (relative paths)."""
    env = env if isinstance(env, Environment) else current_env()
    return embedding_files(env.folders)


def _validate_text(text: Any = None, emphasis: Any = DEFAULT_EMPHASIS) -> Any:
    """VALIDATE_INPUTS: a prompt syntax error becomes a validation error on the node.

    The whole text is checked first, so the position counts from the start of the prompt; then
    every text its schedules produce. With emphasis "None" brackets are text: nothing to check.
    """
    if not isinstance(text, str) or emphasis == "None":
        return True  # a linked text is checked when the node runs
    from comfy_core.prompt.attention import parse_prompt_attention
    from comfy_core.prompt.conditioning import check_prompt
    from comfy_core.prompt.errors import PromptSyntaxError

    try:
        parse_prompt_attention(text)
        check_prompt(text)
    except PromptSyntaxError as exc:
        return str(exc)
    return True


def _embeddings_changed(text: Any = None, folder_embeddings: Any = True, **_: Any) -> Any:
    """IS_CHANGED: the embeddings folder's content, when the prompt may use it."""
    if folder_embeddings or (isinstance(text, str) and "embedding:" in text):
        from comfy_core.prompt.library import folder_fingerprint

        return folder_fingerprint(current_env().folders)
    return ""


def _encode(clip: Any, text: str, options: PromptOptions, use_folder: bool) -> tuple:
    from comfy_core.prompt.conditioning import encode_prompt, encoder_widths, fits
    from comfy_core.prompt.library import folder_embeddings, folder_resolver

    clip = checks.clip(clip, encoders=True)
    text = checks.text(text)
    folders = current_env().folders
    widths = encoder_widths(clip)
    embeddings = folder_embeddings(folders, lambda e: fits(e, widths)) if use_folder else []
    return (encode_prompt(clip, text, options, embeddings=embeddings, resolve=folder_resolver(folders)),)


_COMMON_INPUTS = [
    String("text", multiline=True, dynamicPrompts=True,
           tooltip="AUTOMATIC1111 prompt syntax: (x), [x], (x:1.2), [a:b:N], [a|b], AND, BREAK."),
    Input("clip", "CLIP"),
    Combo("emphasis", list(EMPHASIS_MODES), default=DEFAULT_EMPHASIS,
          tooltip="webui's emphasis mode: Original (mean restored), No norm, Ignore, None (brackets are text)."),
    Int("steps", default=20, min=1, max=10000,
        tooltip="The KSampler's steps: prompt editing switches at the step webui switches at."),
    Combo("scheduler", scheduler_names, default="normal", tooltip="The KSampler's scheduler."),
    Boolean("negative", default=False,
            tooltip="A negative prompt: no AND split or weight stripping; empty is zeros on SDXL."),
    Int("comma_backtrack", default=20, min=0, max=74,
        tooltip="webui's 'Prompt word wrap length limit': 0 disables moving words after a comma."),
    Boolean("folder_embeddings", default=True,
            tooltip="Match the names of the embeddings in models/embeddings in the prompt, as webui."),
]


@node("CLIPTextEncodeWeighted", category="conditioning", display_name="CLIP Text Encode (A1111)",
      description="Encodes a prompt with AUTOMATIC1111's syntax: emphasis, prompt editing, alternation, "
                  "AND, BREAK, embeddings by name.",
      inputs=_COMMON_INPUTS, outputs=[Output("CONDITIONING")],
      validate_inputs=_validate_text, is_changed=_embeddings_changed)
def clip_text_encode_weighted(text: str, clip: Any, emphasis: str = DEFAULT_EMPHASIS, steps: int = 20,
                              scheduler: str = "normal", negative: bool = False, comma_backtrack: int = 20,
                              folder_embeddings: bool = True) -> tuple:
    from comfy_core.prompt.conditioning import PromptOptions

    options = PromptOptions(steps=steps, scheduler=scheduler, emphasis=emphasis,
                            comma_backtrack=comma_backtrack, negative=negative)
    return _encode(clip, text, options, folder_embeddings)


@node("CLIPTextEncodeWeightedSDXL", category="conditioning", display_name="CLIP Text Encode (A1111, SDXL)",
      description="CLIPTextEncodeWeighted with SDXL's size conditioning (original size, crop, target size).",
      inputs=[*_COMMON_INPUTS,
              Int("width", default=1024, min=0, max=MAX_RESOLUTION),
              Int("height", default=1024, min=0, max=MAX_RESOLUTION),
              Int("crop_w", default=0, min=0, max=MAX_RESOLUTION),
              Int("crop_h", default=0, min=0, max=MAX_RESOLUTION),
              Int("target_width", default=1024, min=0, max=MAX_RESOLUTION),
              Int("target_height", default=1024, min=0, max=MAX_RESOLUTION)],
      outputs=[Output("CONDITIONING")],
      validate_inputs=_validate_text, is_changed=_embeddings_changed)
def clip_text_encode_weighted_sdxl(text: str, clip: Any, emphasis: str = DEFAULT_EMPHASIS, steps: int = 20,
                                   scheduler: str = "normal", negative: bool = False, comma_backtrack: int = 20,
                                   folder_embeddings: bool = True, width: int = 1024, height: int = 1024,
                                   crop_w: int = 0, crop_h: int = 0, target_width: int = 1024,
                                   target_height: int = 1024) -> tuple:
    clip = checks.clip(clip, encoders=True)
    from comfy_core.patching.clip import encoder_slots  # any patcher over the encoders (a pack may re-class it)

    if "clip_g" not in encoder_slots(clip.patcher):
        raise NodeInputError("clip", "an SDXL CLIP (with clip_g)", f"encoders {encoder_slots(clip.patcher)}")
    from comfy_core.prompt.conditioning import PromptOptions

    size = {"width": width, "height": height, "crop_w": crop_w, "crop_h": crop_h,
            "target_width": target_width, "target_height": target_height}
    options = PromptOptions(steps=steps, scheduler=scheduler, emphasis=emphasis,
                            comma_backtrack=comma_backtrack, negative=negative, extra=size)
    return _encode(clip, text, options, folder_embeddings)


@node("ApplyEmbedding", category="conditioning", display_name="Apply Embedding (textual inversion)",
      description="Registers a textual-inversion embedding on a copy of the CLIP; its name then matches in "
                  "CLIPTextEncodeWeighted prompts. The input CLIP is unchanged.",
      inputs=[Input("clip", "CLIP"), Combo("embedding", list_embedding_files),
              String("token_name", default="", tooltip="Name to match in prompts; empty: the file name.")],
      outputs=[Output("CLIP")])
def apply_embedding(clip: Any, embedding: str, token_name: str = "") -> tuple:
    from comfy_core.prompt.conditioning import with_embedding
    from comfy_core.prompt.embedding import load_embedding

    clip = checks.clip(clip, encoders=True)
    path = model_file(EMBEDDINGS_KIND, embedding, "embedding")
    name = token_name.strip() or None
    return (with_embedding(clip, load_embedding(path, name=name)),)
