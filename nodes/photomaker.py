"""PhotoMaker v1 with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_photomaker.py): PhotoMakerLoader (a file of the `photomaker` folder ->
PHOTOMAKER, comfy_core/clip_vision/photomaker.py) and PhotoMakerEncode.

PhotoMakerEncode, as ComfyUI's: the trigger word is "photomaker", found as a word of the text split
on single spaces; the tokens whose word id is its 1-based position are dropped from every chunk
(refilled to the chunk's length with its last token); the text is encoded; then the token at that
position minus one (the class word before the trigger, "a man photomaker" -> "man", counting the
start token) is fused with the first image's ID embedding. The word ids are the tokenizer's, which
numbers weighted segments rather than words (ComfyUI's rule), so in a plain prompt nothing matches
and the trigger stays in the text, as in ComfyUI. Without the trigger the text is encoded as it
is. SDXL's CLIP only (2048-wide tokens).
Where ComfyUI fails on a prompt longer than one chunk (its token mask is 77 long), the position is
the same one in the first chunk here.
"""
from __future__ import annotations

from typing import Any

from graph.native import Input, Output, String, node
from graph.spec import REQUIRED, InputSpec
import nodes.checks as checks
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_photomaker"
KIND = "photomaker"
TRIGGER = "photomaker"


def _photomaker_files(env: Any = None) -> list[str]:
    environment = env if isinstance(env, Environment) else current_env()
    return environment.folders.filenames(KIND)


@node("PhotoMakerLoader", display_name=None, category="_for_testing/photomaker", python_module=MODULE,
      experimental=True, inputs=[InputSpec("photomaker_model_name", _photomaker_files, REQUIRED, {"multiselect": False})],
      outputs=[Output("PHOTOMAKER")])
def photomaker_loader(photomaker_model_name: str) -> tuple[Any]:
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.clip_vision.photomaker import load_photomaker
    from nodes.clip_vision import _text_dtype

    env = current_env()
    path = model_file(KIND, photomaker_model_name, "photomaker_model_name")
    try:
        encoder = load_photomaker(path, _text_dtype(), load_device=getattr(env.memory, "device", None))
    except CheckpointError as exc:
        raise NodeInputError("photomaker_model_name", "a PhotoMaker v1 file", str(exc)) from None
    if env.memory is not None:
        env.memory.track(encoder.clip_vision.patcher)
    return (encoder,)


def trigger_word_id(text: str) -> int:
    """The 1-based position of the trigger among the text's space-separated words, -1 if absent."""
    words = text.split(" ")
    return words.index(TRIGGER) + 1 if TRIGGER in words else -1


def drop_word(tokens: dict[str, list], word_id: int) -> dict[str, list]:
    """Every chunk without the tokens of `word_id`, refilled to its length with its last token."""
    out: dict[str, list] = {}
    for key, chunks in tokens.items():
        out[key] = []
        for chunk in chunks:
            kept = [token for token in chunk if token[2] != word_id]
            out[key].append(kept + [chunk[-1]] * (len(chunk) - len(kept)))
    return out


@node("PhotoMakerEncode", display_name=None, category="_for_testing/photomaker", python_module=MODULE,
      experimental=True,
      inputs=[Input("photomaker", "PHOTOMAKER"), Input("image", "IMAGE"), Input("clip", "CLIP"),
              String("text", default="photograph of photomaker", multiline=True, dynamicPrompts=True)],
      outputs=[Output("CONDITIONING")])
def photomaker_encode(photomaker: Any, image: Any, clip: Any, text: str) -> tuple[list]:
    if not callable(getattr(photomaker, "fuse", None)):
        raise NodeInputError("photomaker", "a PHOTOMAKER model (PhotoMakerLoader)", describe(photomaker))
    image = checks.image_batch(image, "image")
    clip = checks.clip(clip)
    text = checks.text(text)
    word_id = trigger_word_id(text)
    tokens = drop_word(clip.tokenize(text, return_word_ids=True), word_id)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    position = word_id - 1
    if word_id > 0 and position < min(77, cond.shape[1]):
        try:
            cond = photomaker.fuse(cond, image, position)
        except ValueError as exc:
            raise NodeInputError("clip", "SDXL's text encoder (PhotoMaker v1 fuses 2048-wide tokens)", str(exc)) from None
    return ([[cond, {"pooled_output": pooled}]],)
