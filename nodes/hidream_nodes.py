"""HiDream's nodes with today's ComfyUI names, V3 schemas and semantics (comfy_extras/nodes_hidream.py):

- QuadrupleCLIPLoader: four text-encoder files (CLIP-L, CLIP-G, T5-XXL, Llama 3.1 8B, in any
  order: told apart by their weights) as HiDream's CLIP, as ComfyUI's `load_clip` with four files;
  today's optional `device` widget ("default" / "cpu") as CLIPLoader's.
- CLIPTextEncodeHiDream: each of the four encoders its own text: the tokens of `clip_g` for every
  key, then those of `clip_l`, `t5xxl` and `llama` put in their keys, encoded together.
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Combo, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.loaders import CLIP_DEVICES, _files, _load_clip_files
from nodes.environment import model_file

MODULE = "comfy_extras.nodes_hidream"
KEYS = (("clip_l", "l"), ("t5xxl", "t5xxl"), ("llama", "llama"))


def _prompt(name: str) -> InputSpec:
    return String(name, multiline=True, dynamicPrompts=True)


@v3_node("QuadrupleCLIPLoader", category="model/loaders", display_name="Load CLIP (Quadruple)", python_module=MODULE,
         description="Recipes:\nhidream: long clip-l, long clip-g, t5xxl, llama_8b_3.1_instruct",
         inputs=[*(InputSpec(f"clip_name{i}", _files("text_encoders"), REQUIRED, {"multiselect": False})
                   for i in range(1, 5)),
                 Combo("device", CLIP_DEVICES, optional=True, advanced=True)],
         outputs=[Output("CLIP")])
def quadruple_clip_loader(clip_name1: str, clip_name2: str, clip_name3: str, clip_name4: str,
                          device: str = "default") -> tuple[Any]:
    """`device` "cpu" keeps the encoders on the CPU, as CLIPLoader's: today's declaration
    (comfy_extras/nodes_hidream.py@f08c8478c741435934fc6802c08fdf4a46d113ff: "Load CLIP (Quadruple)"
    in model/loaders, an optional advanced `device` combo ["default", "cpu"] after the four files)."""
    names = (clip_name1, clip_name2, clip_name3, clip_name4)
    paths = [model_file("text_encoders", name, f"clip_name{i}") for i, name in enumerate(names, 1)]
    return (_load_clip_files(paths, "hidream", device),)


@v3_node("CLIPTextEncodeHiDream", category="advanced/conditioning", python_module=MODULE,
         inputs=[Socket("clip", "CLIP"), _prompt("clip_l"), _prompt("clip_g"), _prompt("t5xxl"), _prompt("llama")],
         outputs=[Output("CONDITIONING")])
def clip_text_encode_hidream(clip: Any, clip_l: str, clip_g: str, t5xxl: str, llama: str) -> tuple[list]:
    clip = checks.clip(clip)
    texts = {name: checks.text(value, name) for name, value in (("clip_l", clip_l), ("clip_g", clip_g),
                                                                ("t5xxl", t5xxl), ("llama", llama))}
    tokens = dict(clip.tokenize(texts["clip_g"]))
    missing = [key for _, key in KEYS if key not in tokens] + ([] if "g" in tokens else ["g"])
    if missing:
        raise NodeInputError("clip", "a HiDream CLIP (QuadrupleCLIPLoader, or CLIPLoader type hidream)",
                             f"one that tokenizes for {sorted(tokens)}")
    for name, key in KEYS:
        tokens[key] = clip.tokenize(texts[name])[key]
    return (clip.encode_from_tokens_scheduled(tokens),)
