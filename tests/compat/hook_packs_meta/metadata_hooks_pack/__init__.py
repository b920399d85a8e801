"""A fixture pack written the way the metadata-saving packs are (ComfyUI-SaveImageWithMetaData and
its forks: hook.py's `pre_execute` / `pre_get_input_data`, capture.py's `Capture.get_inputs`):
at import it wraps `execution.PromptExecutor.execute` on the class (keeping the executor as
`prompt_executer`, the prompt and its extra data) and `execution.get_input_data` (noting which node
is the saving one, and filling a hidden input kind of its own, TASK_CONTEXT, as a worker pack does); its save node then walks the prompt and reads every node's resolved inputs
with `get_input_data(inputs, class_def, node_id, outputs, DynamicPrompt(prompt), extra_data)`,
`outputs` being `prompt_executer.caches.outputs` behind a version shim (`get_local` first), and
shows what it found. Its execute wrapper also skips or fails on request (`extra_data` keys
`meta_skip`, `meta_raise_before`, `meta_raise_after`) and records the executor's state after.

Kept apart from tests/compat/packs: the class attribute it assigns is one per process, so the
test that loads it restores the built-in afterwards."""
import inspect

import execution
from comfy_execution.graph import DynamicPrompt
from nodes import NODE_CLASS_MAPPINGS as ALL_NODES

RECORD = {"prompts": [], "after": [], "input_reads": [], "captures": []}
current_prompt = {}
current_extra_data = {}
prompt_executer = None
current_save_node_id = -1


def pre_execute(self, prompt, prompt_id, extra_data, execute_outputs):
    global current_prompt, current_extra_data, prompt_executer
    current_prompt = prompt
    current_extra_data = extra_data
    prompt_executer = self
    RECORD["prompts"].append({"executor": self, "prompt_id": prompt_id, "outputs": list(execute_outputs),
                              "client_id": extra_data.get("client_id")})


def pre_get_input_data(inputs, class_def, unique_id, *args):
    global current_save_node_id
    RECORD["input_reads"].append({"unique_id": unique_id, "class": class_def.__name__, "nargs": 3 + len(args),
                                  "get_cache": callable(getattr(args[0], "get_cache", None)) if args else False,
                                  "list_type": type(args[0]).__name__ if args else None})
    if class_def is MetaSaveCapture:
        current_save_node_id = unique_id


_original_execute = execution.PromptExecutor.execute


def execute_with_metadata(self, prompt, prompt_id, extra_data={}, execute_outputs=[]):
    if extra_data.get("meta_raise_before"):
        raise RuntimeError("the metadata hook refuses before the prompt")
    pre_execute(self, prompt, prompt_id, extra_data, execute_outputs)
    if extra_data.get("meta_skip"):
        return None
    result = _original_execute(self, prompt, prompt_id, extra_data, execute_outputs)
    RECORD["after"].append({"success": self.success, "outputs": dict(self.history_result.get("outputs", {})),
                            "messages": [kind for kind, _ in self.status_messages]})
    if extra_data.get("meta_raise_after"):
        raise RuntimeError("the metadata hook refuses after the prompt")
    return result


_original_get_input_data = execution.get_input_data


def get_input_data_with_context(inputs, class_def, unique_id, *args, **kwargs):
    """Notes the call, then (as a worker pack does) fills a hidden input kind of its own."""
    pre_get_input_data(inputs, class_def, unique_id, *args)
    result = _original_get_input_data(inputs, class_def, unique_id, *args, **kwargs)
    hidden = class_def.INPUT_TYPES().get("hidden", {})
    for name, kind in hidden.items():
        if kind == "TASK_CONTEXT":
            result[0][name] = [{"task": f"meta-{unique_id}"}]
    return result


execution.PromptExecutor.execute = execute_with_metadata
execution.get_input_data = get_input_data_with_context


class OutputCacheCompat:
    """The packs' shim over `caches.outputs` across ComfyUI versions (sync lookups only)."""

    def __init__(self, cache):
        self._cache = cache

    def get_cache(self, input_unique_id, unique_id=None):
        get_local = getattr(self._cache, "get_local", None)
        if callable(get_local):
            return get_local(input_unique_id)
        result = self._cache.get(input_unique_id)
        return None if inspect.isawaitable(result) else result


class MetaSaveCapture:
    """Shows, as JSON-able values, the widget and resolved link inputs of every node of the
    running prompt, read the metadata savers' way."""

    CATEGORY = "metadata_hooks"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "capture"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"images": ("IMAGE",), "raw_cache": ("BOOLEAN", {"default": False})},
                "hidden": {"task_context": "TASK_CONTEXT"}}

    def capture(self, images, raw_cache, task_context=None):
        outputs = prompt_executer.caches.outputs
        if not raw_cache:
            outputs = OutputCacheCompat(outputs)
        found = {"save_node": current_save_node_id, "nodes": {}, "task_context": task_context}
        for node_id, node in current_prompt.items():
            class_def = ALL_NODES[node["class_type"]]
            input_data, missing, _hidden = execution.get_input_data(
                node["inputs"], class_def, node_id, outputs, DynamicPrompt(current_prompt), current_extra_data)
            found["nodes"][node_id] = {
                name: (list(values[0].shape) if hasattr(values[0], "shape") else values[0])
                for name, values in input_data.items() if values and name not in missing}
        upstream = prompt_executer.caches.outputs.get_local(current_prompt[current_save_node_id]["inputs"]["images"][0])
        found["upstream_shape"] = list(upstream.outputs[0][0].shape)
        found["known_nodes"] = sorted(prompt_executer.caches.outputs.all_node_ids())
        RECORD["captures"].append(found)
        return {"ui": {"metadata": [found]}}


NODE_CLASS_MAPPINGS = {"MetaSaveCapture": MetaSaveCapture}
