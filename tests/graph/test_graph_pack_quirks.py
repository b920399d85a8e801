"""Declaration quirks in a pack's nodes: registered as ComfyUI reads them, never refusing the pack."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from graph.executor import Executor
from graph.packs import load_custom_nodes
from graph.registry import Registry
from graph.validation import validate_prompt
from tests.graph.helpers import node, run_prompt

QUIRKY_PACKS = Path(__file__).parent / "quirky_packs"


@pytest.fixture
def loaded(caplog) -> tuple[Registry, list]:
    registry = Registry()
    with caplog.at_level(logging.WARNING, logger="graph.packs"):
        results = load_custom_nodes(registry, [QUIRKY_PACKS])
    return registry, results


def test_a_quirky_node_does_not_refuse_its_pack(loaded, caplog):
    registry, [result] = loaded
    assert result.ok and result.error is None
    assert result.nodes == ["QuirkyMakeList", "QuirkyPlain"]
    assert result.skipped == ["QuirkyBadValidate", "QuirkyBadOutputs"]  # unusable: skipped alone
    assert "QuirkyMakeList" in registry and "QuirkyPlain" in registry
    # One warning for the duplicated input, naming the pack, the node and the input.
    records = caplog.get_records("setup")  # the fixture loaded the pack
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "quirky_pack" in warnings[0] and "QuirkyMakeList" in warnings[0] and "'value1'" in warnings[0]
    errors = [r.getMessage() for r in records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all("quirky_pack" in e for e in errors)
    assert "QuirkyBadValidate" in errors[0] and "QuirkyBadOutputs" in errors[1]


def test_the_first_declaration_of_a_name_wins(loaded):
    registry, _ = loaded
    spec = registry.get("QuirkyMakeList")
    assert [(i.name, i.section) for i in spec.inputs] == [
        ("value1", "required"), ("value2", "optional"), ("value3", "optional"), ("value4", "optional")]
    assert spec.input("value1").options["default"] == 1  # the `required` entry, not the `optional` one
    # /object_info shows INPUT_TYPES() as the node returns it, as ComfyUI does.
    info = registry.object_info()["QuirkyMakeList"]
    assert list(info["input"]["optional"]) == ["value1", "value2", "value3", "value4"]
    assert info["input_order"]["required"] == ["value1"]


async def test_the_node_validates_and_runs_as_on_comfyui(loaded):
    registry, _ = loaded
    prompt = {"1": node("QuirkyMakeList", value1=5, value3=7), "2": node("QuirkyPlain", values=["1", 0])}
    outcome = await run_prompt(Executor(registry), prompt)
    assert outcome.status == "success" and outcome.ui_outputs["2"] == {"total": [12]}

    # value1 is required (ComfyUI's get_input_info looks in `required` first).
    missing = {"1": node("QuirkyMakeList", value2=5), "2": node("QuirkyPlain", values=["1", 0])}
    result = await validate_prompt(missing, registry)
    assert not result.ok
    [error] = result.node_errors["1"]["errors"]
    assert error["type"] == "required_input_missing" and error["extra_info"]["input_name"] == "value1"


def test_input_types_failing_at_load_is_a_quirk_not_a_refusal():
    class Flaky:
        calls = 0

        @classmethod
        def INPUT_TYPES(cls):
            cls.calls += 1
            if cls.calls == 1:
                raise OSError("models folder not mounted yet")
            return {"required": {"x": ("INT",)}}

        RETURN_TYPES = ("INT",)
        FUNCTION = "run"

        def run(self, x):
            return (x,)

    spec = Registry().add_v1("Flaky", Flaky)
    assert spec.inputs == () and len(spec.quirks) == 1 and "models folder not mounted yet" in spec.quirks[0]
    assert [i.name for i in spec.current_inputs()] == ["x"]  # read again for each prompt
