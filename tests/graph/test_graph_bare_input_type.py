"""A V1 `INPUT_TYPES` entry that is a bare type string instead of a tuple (survey finding a9).

prompt-reader-node's `SDPromptSaver` declares `"lora_name": any_type` with `any_type =
AnyType("*")` (a `str` subclass). ComfyUI lists the entry as returned in /object_info and reads it
like the tuple it expects (comfy_execution/graph.py `get_input_info`: type `input_info[0]`, options
`input_info[1]` when longer than 1): `"*"` is the any-type; a longer string's type is its first
character (`"STRING"` -> `"S"`, so a STRING link is a type mismatch and a constant is not
converted), and its second character gives no options.
"""
from __future__ import annotations

import json
import logging
import uuid

from graph.executor import Executor
from graph.registry import Registry
from graph.validation import validate_prompt
from tests.graph.helpers import node, run_prompt


class AnyType(str):
    """The packs' wildcard type: equal to every type."""

    def __ne__(self, other: object) -> bool:
        return False


class Saver:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": ""})},
                "optional": {"lora_name": AnyType("*"), "bare": "STRING"}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, text, lora_name=None, bare=None):
        return {"ui": {"got": [repr(lora_name), repr(bare)]}}


class MakeInt:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self):
        return (7,)


def _registry() -> Registry:
    registry = Registry()
    registry.add_v1("Saver", Saver)
    registry.add_v1("MakeInt", MakeInt)
    return registry


def test_bare_entries_are_read_as_comfyui_reads_them(caplog):
    with caplog.at_level(logging.WARNING):
        registry = _registry()
    spec = registry.get("Saver")
    lora, bare = spec.input("lora_name"), spec.input("bare")
    assert (lora.type, lora.section, dict(lora.options)) == ("*", "optional", {})
    assert type(lora.type) is str  # `AnyType("*")[0]`: a plain str, as in ComfyUI
    assert (bare.type, bare.section, dict(bare.options)) == ("S", "optional", {})
    assert any("'bare'" in q and "'S'" in q for q in spec.quirks)
    assert not any("'lora_name'" in q for q in spec.quirks)


def test_object_info_lists_the_entries_as_returned():
    info = json.loads(json.dumps(_registry().object_info()["Saver"]))
    assert info["input"]["optional"] == {"lora_name": "*", "bare": "STRING"}
    assert info["input_order"]["optional"] == ["lora_name", "bare"]


async def test_a_prompt_with_the_node_validates_and_runs():
    registry = _registry()
    prompt = {"1": node("MakeInt"), "2": node("Saver", text="hi", lora_name=["1", 0], bare=5)}
    outcome = await run_prompt(Executor(registry), prompt, str(uuid.uuid4()))
    assert outcome.status == "success"
    # the any-type input takes the INT link; the constant for type "S" is passed unconverted
    assert outcome.ui_outputs["2"] == {"got": ["7", "5"]}


async def test_a_link_into_a_multi_character_bare_entry_mismatches_its_first_character():
    registry = _registry()
    prompt = {"1": node("MakeInt"), "2": node("Saver", text="hi", bare=["1", 0])}
    result = await validate_prompt(prompt, registry)
    assert not result.ok
    [error] = result.node_errors["2"]["errors"]
    assert error["type"] == "return_type_mismatch"
    assert error["details"] == "bare, received_type(INT) mismatch input_type(S)"


async def test_the_node_runs_without_its_optional_bare_inputs():
    registry = _registry()
    outcome = await run_prompt(Executor(registry), {"2": node("Saver", text="hi")}, str(uuid.uuid4()))
    assert outcome.status == "success" and outcome.ui_outputs["2"] == {"got": ["None", "None"]}
