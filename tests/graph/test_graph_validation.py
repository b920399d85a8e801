"""Prompt validation: ComfyUI's error types and shapes, coercion, type matching, VALIDATE_INPUTS."""
from __future__ import annotations

from graph.registry import Registry
from graph.validation import validate_prompt
from tests.graph.helpers import node


def only_error(result, node_id):
    errors = result.node_errors[node_id]["errors"]
    assert len(errors) == 1, errors
    return errors[0]


async def test_valid_prompt(registry):
    prompt = {"1": node("IntConst", value=1), "2": node("Collect", value=["1", 0])}
    result = await validate_prompt(prompt, registry)
    assert result.ok and result.error is None and result.node_errors == {} and result.outputs == ["2"]


async def test_missing_class_type_is_invalid_prompt(registry):
    result = await validate_prompt({"7": {"inputs": {}}}, registry)
    assert not result.ok
    assert result.error == {"type": "invalid_prompt",
                            "message": "Cannot execute because a node is missing the class_type property.",
                            "details": "Node ID '#7'", "extra_info": {}}
    assert (await validate_prompt(["not", "a", "dict"], registry)).error["type"] == "invalid_prompt"


async def test_unknown_class_is_missing_node_type(registry):
    prompt = {"3": {"class_type": "Nope", "inputs": {}, "_meta": {"title": "My node"}}}
    result = await validate_prompt(prompt, registry)
    assert result.error["type"] == "missing_node_type"
    assert result.error["details"] == "Node ID '#3'"
    assert result.error["extra_info"] == {"node_id": "3", "class_type": "Nope", "node_title": "My node"}
    assert result.node_errors == {}


async def test_no_outputs_and_partial_targets(registry):
    prompt = {"1": node("IntConst", value=1), "2": node("Collect", value=["1", 0]),
              "3": node("Collect", value=5)}
    result = await validate_prompt({"1": node("IntConst", value=1)}, registry)
    assert result.error == {"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "",
                            "extra_info": {}}
    partial = await validate_prompt(prompt, registry, partial_execution_targets=["3", "1"])
    assert partial.ok and partial.outputs == ["3"]
    empty = await validate_prompt(prompt, registry, partial_execution_targets=[])
    assert empty.error["type"] == "prompt_no_outputs"


async def test_failed_outputs_are_dropped_others_kept(registry):
    prompt = {"1": node("IntConst", value=5000), "2": node("Collect", value=["1", 0]),
              "3": node("IntConst", value=1), "4": node("Collect", value=["3", 0])}
    result = await validate_prompt(prompt, registry)
    assert result.ok and result.outputs == ["4"]
    # Only the node with a reason of its own is listed, with the output that depends on it.
    assert set(result.node_errors) == {"1"}
    assert result.node_errors["1"]["dependent_outputs"] == ["2"]
    assert result.node_errors["1"]["class_type"] == "IntConst"


async def test_all_outputs_failing(registry):
    prompt = {"1": node("IntConst", value=5000), "2": node("Collect", value=["1", 0])}
    result = await validate_prompt(prompt, registry)
    assert not result.ok and result.outputs == []
    assert result.error["type"] == "prompt_outputs_failed_validation"
    assert result.error["message"] == "Prompt outputs failed validation"
    assert result.error["details"] == ""  # the output itself has no reasons; IntConst has
    err = only_error(result, "1")
    assert err == {"type": "value_bigger_than_max", "message": "Value 5000 bigger than max of 1000",
                   "details": "value", "extra_info": {"input_name": "value",
                                                      "input_config": ["INT", {"default": 0, "min": -1000, "max": 1000}],
                                                      "received_value": 5000}}


async def test_required_input_missing(registry):
    result = await validate_prompt({"1": node("Collect")}, registry)
    assert only_error(result, "1") == {"type": "required_input_missing", "message": "Required input is missing",
                                       "details": "value", "extra_info": {"input_name": "value"}}
    assert result.error["details"] == "Required input is missing: value"


async def test_bad_linked_input(registry):
    result = await validate_prompt({"1": node("Collect", value=["2", 0, 1])}, registry)
    err = only_error(result, "1")
    assert err["type"] == "bad_linked_input" and err["extra_info"]["received_value"] == ["2", 0, 1]


async def test_return_type_mismatch(registry):
    prompt = {"1": node("Choose", mode="first", text="", ratio=0.5, flag=False),
              "2": node("FloatSink", value=["1", 0])}
    err = only_error(await validate_prompt(prompt, registry), "2")
    assert err["type"] == "return_type_mismatch"
    assert err["details"] == "value, received_type(STRING) mismatch input_type(FLOAT,INT)"
    assert err["extra_info"]["received_type"] == "STRING" and err["extra_info"]["linked_node"] == ["1", 0]


async def test_type_matching_wildcard_union_and_ne_override(registry):
    prompt = {"1": node("IntConst", value=1), "2": node("FloatSink", value=["1", 0]),  # union
              "3": node("Collect", value=["1", 0]),  # "*" input
              "4": node("AnyOut", value=["1", 0]), "5": node("StringSink", value=["4", 0])}  # __ne__ type
    result = await validate_prompt(prompt, registry)
    assert result.ok and sorted(result.outputs) == ["2", "3", "5"]


async def test_invalid_input_type(registry):
    err = only_error(await validate_prompt({"1": node("IntConst", value="abc"),
                                            "2": node("Collect", value=["1", 0])}, registry), "1")
    assert err["type"] == "invalid_input_type"
    assert err["message"] == "Failed to convert an input value to a INT value"
    assert err["details"].startswith("value, abc, invalid literal")
    assert err["extra_info"]["received_value"] == "abc"


async def test_min_and_combo_errors(registry):
    prompt = {"1": node("IntConst", value=-5000), "2": node("Collect", value=["1", 0]),
              "3": node("Choose", mode="fourth", text="", ratio=0.5, flag=False), "4": node("StringSink", value=["3", 0])}
    result = await validate_prompt(prompt, registry)
    assert only_error(result, "1")["type"] == "value_smaller_than_min"
    err = only_error(result, "3")
    assert err == {"type": "value_not_in_list", "message": "Value not in list",
                   "details": "mode: 'fourth' not in ['first', 'second', 'third']",
                   "extra_info": {"input_name": "mode", "input_config": [["first", "second", "third"], {}],
                                  "received_value": "fourth"}}


async def test_long_combo_lists_are_summarised():
    class Big:
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"pick": ([f"f{i}" for i in range(30)],)}}

        RETURN_TYPES = ()
        FUNCTION = "run"
        OUTPUT_NODE = True

        def run(self, pick):
            return ()

    reg = Registry()
    reg.add_v1("Big", Big)
    err = only_error(await validate_prompt({"1": node("Big", pick="zzz")}, reg), "1")
    assert err["details"] == "pick: 'zzz' not in (list of length 30)" and err["extra_info"]["input_config"] is None


async def test_constants_are_coerced_in_place(registry):
    prompt = {"1": node("Choose", mode="first", text=5, ratio="0.25", flag="false"),
              "2": node("StringSink", value=["1", 0]),
              "3": node("IntConst", value=5.7), "4": node("Collect", value=["3", 0]),
              "5": node("Collect", value={"__value__": [1, 2]})}
    assert (await validate_prompt(prompt, registry)).ok
    assert prompt["1"]["inputs"] == {"mode": "first", "text": "5", "ratio": 0.25, "flag": True}
    assert prompt["3"]["inputs"]["value"] == 5
    assert prompt["5"]["inputs"]["value"] == [1, 2]


async def test_validate_inputs_named_input_skips_builtin_checks(registry):
    ok = {"1": node("Even", value=12), "2": node("Collect", value=["1", 0])}  # above max 10 but even
    assert (await validate_prompt(ok, registry)).ok
    bad = {"1": node("Even", value=11), "2": node("Collect", value=["1", 0])}
    err = only_error(await validate_prompt(bad, registry), "1")
    assert err == {"type": "custom_validation_failed", "message": "Custom validation failed for node",
                   "details": "value - 11 is odd", "extra_info": {"input_name": "value"}}
    linked = {"0": node("IntConst", value=3), "1": node("Even", value=["0", 0]), "2": node("Collect", value=["1", 0])}
    assert (await validate_prompt(linked, registry)).ok  # linked inputs reach VALIDATE_INPUTS as None


async def test_validate_inputs_kwargs_and_input_types(registry):
    prompt = {"1": node("KwargsValidate", value=5), "2": node("Collect", value=["1", 0]),
              "3": node("IntConst", value=1), "4": node("AnyTypeCheck", value=["3", 0]),
              "5": node("StringSink", value=["4", 0])}
    assert (await validate_prompt(prompt, registry)).ok
    prompt["4"]["inputs"]["value"] = ["6", 0]
    prompt["6"] = node("AnyOut", value=["3", 0])  # received type "ANYTHING": refused by the node
    err = only_error(await validate_prompt(prompt, registry), "4")
    assert err["type"] == "custom_validation_failed" and "bad type" in err["details"]


async def test_async_validate_inputs(registry):
    prompt = {"1": node("AsyncValidate", value=13), "2": node("Collect", value=["1", 0])}
    err = only_error(await validate_prompt(prompt, registry), "1")
    assert err["details"] == "value - unlucky"


async def test_exception_during_validation_and_inner_validation(registry):
    top = await validate_prompt({"1": node("Collect", value=["99", 0])}, registry)
    err = only_error(top, "1")
    assert err["type"] == "exception_during_validation"
    assert err["message"] == "Exception when validating node"
    assert err["extra_info"]["exception_type"] == "KeyError" and isinstance(err["extra_info"]["traceback"], list)

    inner = await validate_prompt({"1": node("RaisingValidate", value=1), "2": node("Collect", value=["1", 0])},
                                  registry)
    err = only_error(inner, "1")
    assert err["type"] == "exception_during_inner_validation"
    assert err["message"] == "Exception when validating inner node"
    assert err["details"] == "validator exploded"
    assert err["extra_info"]["input_name"] == "value" and err["extra_info"]["linked_node"] == ["1", 0]
    assert err["extra_info"]["exception_type"] == "RuntimeError"


async def test_static_cycle_is_reported_with_its_nodes(registry):
    prompt = {"1": node("Add", a=["2", 0], b=1), "2": node("Add", a=["1", 0], b=1),
              "3": node("Collect", value=["1", 0])}
    result = await validate_prompt(prompt, registry)
    assert not result.ok
    [(node_id, entry)] = result.node_errors.items()
    err = entry["errors"][0]
    assert err["extra_info"]["exception_type"] == "graph.errors.DependencyCycleError"
    assert set(err["extra_info"]["cycle"]) == {"1", "2"}
    assert "Dependency cycle detected" in err["details"]


async def test_deep_chain_validates_without_recursion(registry):
    prompt = {"0": node("IntConst", value=0)}
    for i in range(1, 3000):
        prompt[str(i)] = node("Add", a=[str(i - 1), 0], b=1)
    prompt["out"] = node("Collect", value=["2999", 0])
    assert (await validate_prompt(prompt, registry)).ok


async def test_undeclared_inputs_are_not_validated(registry):
    prompt = {"1": node("IntConst", value=1), "2": node("Variadic", first=["1", 0], extra=["1", 0], junk="x"),
              "3": node("Collect", value=["2", 0])}
    assert (await validate_prompt(prompt, registry)).ok


async def test_combo_lists_from_the_environment_and_v3_style_combos():
    from graph.native import Combo, node as native_node
    from graph.spec import InputSpec, NodeBehaviour, NodeSpec

    @native_node("Pick", inputs=[Combo("name", lambda env: sorted(env or []))], output_node=True)
    def pick(name):
        return {"ui": {}}

    reg = Registry()
    reg.add_native(pick)
    prompt = {"1": node("Pick", name="b.safetensors")}
    assert (await validate_prompt(prompt, reg, env=["a.safetensors", "b.safetensors"])).ok
    err = only_error(await validate_prompt(prompt, reg, env=["a.safetensors"]), "1")
    assert err["type"] == "value_not_in_list" and err["details"] == "name: 'b.safetensors' not in ['a.safetensors']"

    v3 = NodeSpec("V3Pick", inputs=(InputSpec("mode", "COMBO", options={"options": ["x", "y"]}),), outputs=(),
                  behaviour=NodeBehaviour(make_instance=lambda: None, call=lambda _i, **kw: {"ui": {}}),
                  output_node=True)
    reg.add_spec(v3)
    assert (await validate_prompt({"1": node("V3Pick", mode="y")}, reg)).ok
    assert only_error(await validate_prompt({"1": node("V3Pick", mode="z")}, reg), "1")["type"] == "value_not_in_list"
