"""A fixture pack that wraps ComfyUI's `execution._async_map_node_over_list` and `execution.execute`
at import, as ComfyUI-Lora-Manager's metadata collector does (py/metadata_collector/metadata_hook.py:
detect the async executor, wrap both, record the arguments, call the original), and records what
its wrappers saw in `RECORD`. Its wrappers fail on request: the map wrapper for a HookAddOne call
whose value is 99, the execute wrapper for the node `extra_data["hook_raise_in_execute"]` names.

Kept out of tests/compat/packs: every server loading that folder would run its prompts through
these wrappers."""
import inspect

import execution

RECORD = {"calls": [], "steps": [], "detected_async": None}

_original_map = execution._async_map_node_over_list
_original_execute = execution.execute
RECORD["detected_async"] = inspect.iscoroutinefunction(_original_map) and not hasattr(execution,
                                                                                         "_map_node_over_list")


async def map_node_over_list_with_record(prompt_id, unique_id, obj, input_data_all, func, allow_interrupt=False,
                                         execution_block_cb=None, pre_execute_cb=None, v3_data=None):
    entry = {"prompt_id": prompt_id, "unique_id": unique_id, "class": obj.__class__.__name__, "func": func,
             "FUNCTION": getattr(obj, "FUNCTION", None), "RETURN_TYPES": getattr(obj, "RETURN_TYPES", None),
             "inputs": {name: list(values) for name, values in input_data_all.items()},
             "allow_interrupt": allow_interrupt, "callbacks": (callable(execution_block_cb), callable(pre_execute_cb)),
             "v3_data": v3_data, "results": None}
    RECORD["calls"].append(entry)
    if obj.__class__.__name__ == "HookAddOne" and 99 in input_data_all.get("value", []):
        raise RuntimeError("the map wrapper refuses 99")
    results = await _original_map(prompt_id, unique_id, obj, input_data_all, func, allow_interrupt,
                                  execution_block_cb, pre_execute_cb, v3_data=v3_data)
    entry["results"] = results
    return results


async def execute_with_record(*args, **kwargs):
    server, dynprompt, caches, node_id, extra_data, executed, prompt_id = args[:7]
    RECORD["steps"].append({"node_id": node_id, "prompt_id": prompt_id, "dynprompt": dynprompt,
                            "class_type": dynprompt.get_node(node_id)["class_type"],
                            "original_prompt": dynprompt.original_prompt, "extra_data": extra_data,
                            "executed": set(executed), "nargs": len(args), "server": server,
                            "get_cache": callable(getattr(args[7], "get_cache", None))})
    if extra_data.get("hook_raise_in_execute") == node_id:
        raise RuntimeError(f"the execute wrapper refuses node {node_id}")
    result = await _original_execute(*args, **kwargs)
    RECORD["steps"][-1]["result"] = result
    return result


execution._async_map_node_over_list = map_node_over_list_with_record
execution.execute = execute_with_record


class HookNumbers:
    """A list of the integers start .. start+count-1 (OUTPUT_IS_LIST)."""

    CATEGORY = "exec_hooks"
    RETURN_TYPES = ("INT",)
    OUTPUT_IS_LIST = (True,)
    FUNCTION = "numbers"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"start": ("INT", {"default": 1}), "count": ("INT", {"default": 3, "min": 1})}}

    def numbers(self, start, count):
        return (list(range(start, start + count)),)


class HookAddOne:
    """value + 1, called once per list element (with its UNIQUE_ID hidden input)."""

    CATEGORY = "exec_hooks"
    RETURN_TYPES = ("INT",)
    FUNCTION = "add"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0})}, "hidden": {"unique_id": "UNIQUE_ID"}}

    def add(self, value, unique_id):
        return (value + 1,)


class HookSum:
    """The sum of a list of integers (INPUT_IS_LIST), shown in the UI."""

    CATEGORY = "exec_hooks"
    RETURN_TYPES = ("INT",)
    INPUT_IS_LIST = True
    OUTPUT_NODE = True
    FUNCTION = "total"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"values": ("INT", {"default": 0})}}

    def total(self, values):
        return {"ui": {"sum": [sum(values)]}, "result": (sum(values),)}


class HookLazyPick:
    """`a` unless `use_b`; asks only for the lazy input it needs (check_lazy_status)."""

    CATEGORY = "exec_hooks"
    RETURN_TYPES = ("INT",)
    FUNCTION = "pick"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"use_b": ("BOOLEAN", {"default": False}),
                             "a": ("INT", {"lazy": True}), "b": ("INT", {"lazy": True})}}

    def check_lazy_status(self, use_b, a=None, b=None):
        return ["b"] if use_b else ["a"]

    def pick(self, use_b, a=None, b=None):
        return (b if use_b else a,)


NODE_CLASS_MAPPINGS = {"HookNumbers": HookNumbers, "HookAddOne": HookAddOne, "HookSum": HookSum,
                       "HookLazyPick": HookLazyPick}
