"""PreviewAny (ComfyUI's nodes_preview_any.py): the text it shows for each kind of value, and its
STRING output (today's ComfyUI passes the same text on)."""
from __future__ import annotations

import pytest
import torch

from nodes.preview_any import UNSERIALIZABLE, preview_any


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize("value, text", [
    ("text", "text"), (3, "3"), (2.5, "2.5"), (True, "True"), (None, "None"),
    ([1, "a", {"k": 2}], '[\n    1,\n    "a",\n    {\n        "k": 2\n    }\n]'),
    ({"a": (1, 2)}, '{\n    "a": [\n        1,\n        2\n    ]\n}'),
    (torch.ones(2), str(torch.ones(2))),  # not JSON: str()
    (_Unprintable(), UNSERIALIZABLE),
])
def test_preview_text(value, text):
    assert preview_any(value) == {"ui": {"text": (text,)}, "result": (text,)}


async def test_a_workflow_of_primitives_strings_sizes_and_an_animation(tmp_path):
    from graph.executor import Executor
    from graph.registry import Registry
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    registry = Registry()
    register_builtin_nodes(registry)
    prompt = {
        "1": {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "a1\nb2"}},
        "2": {"class_type": "StringConcatenate", "inputs": {"string_a": ["1", 0], "string_b": "c3", "delimiter": "|"}},
        "3": {"class_type": "RegexReplace", "inputs": {"string": ["2", 0], "regex_pattern": r"\d", "replace": "#"}},
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}},
        "5": {"class_type": "PrimitiveInt", "inputs": {"value": -7}},
        "6": {"class_type": "PreviewAny", "inputs": {"source": ["5", 0]}},
        "7": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 6, "batch_size": 2, "color": 0xFF0000}},
        "8": {"class_type": "GetImageSize", "inputs": {"image": ["7", 0]}},
        "9": {"class_type": "PreviewAny", "inputs": {"source": ["8", 2]}},
        "11": {"class_type": "StringConcatenate", "inputs": {"string_a": ["9", 0], "string_b": "!", "delimiter": ""}},
        "12": {"class_type": "PreviewAny", "inputs": {"source": ["11", 0]}},
        "10": {"class_type": "SaveAnimatedPNG", "inputs": {"images": ["7", 0], "filename_prefix": "anim",
                                                           "fps": 5.0, "compress_level": 1}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    out = await Executor(registry, env=env).execute(prompt, "extras", outputs=checked.outputs,
                                                    extra_data={"extra_pnginfo": {"workflow": {}}})
    assert out.status == "success", out.error
    assert out.ui_outputs["4"] == {"text": ["a#\nb#|c#"]}
    assert out.ui_outputs["6"] == {"text": ["-7"]} and out.ui_outputs["9"] == {"text": ["2"]}
    assert out.ui_outputs["12"] == {"text": ["2!"]}  # PreviewAny's STRING output, passed on
    assert out.ui_outputs["10"] == {"images": [{"filename": "anim_00001_.png", "subfolder": "", "type": "output"}],
                                    "animated": [True]}
    assert (env.output_dir / "anim_00001_.png").is_file()
