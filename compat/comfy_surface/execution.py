"""ComfyUI's top-level `execution` module for node packs (compat/execution_api.py; the queue
class is compat/pack_queue.py's, what `PromptServer.instance.prompt_queue` is).

`validate_prompt` is one too: POST /prompt validates through a pack's replacement.
`execute`, `_async_map_node_over_list` and `get_input_data` are extension points: a pack's
assignment (a wrapper that records and calls the original, as ComfyUI-Lora-Manager's and the
metadata savers') is its session's, and that session's executor then runs every node step, node
call and input reading through it; so does a pack's `PromptExecutor.execute` for every prompt
(compat/execution_routes.py).
"""
import nodes  # noqa: F401 -- ComfyUI's execution module imports it; packs read `execution.nodes`
from compat.facade import facade, point

# ComfyUI's module has this name, set to None ("Don't hook this please"); today's executor maps
# node calls with `_async_map_node_over_list` only (there is no `_map_node_over_list`).
map_node_over_list = None

facade(__name__, {
    "PromptExecutor": "compat.execution_api:PromptExecutor",
    "PromptQueue": "compat.pack_queue:PackPromptQueue",
    "ExecutionResult": "compat.execution_api:ExecutionResult",
    "IsChangedCache": "compat.execution_api:IsChangedCache",
    "CacheType": "compat.execution_api:CacheType",
    "DuplicateNodeError": "compat.execution_api:DuplicateNodeError",
    "NodeExecutionError": "compat.execution_api:NodeExecutionError",
    "SENSITIVE_EXTRA_DATA_KEYS": "compat.execution_api:SENSITIVE_EXTRA_DATA_KEYS",
    "MAXIMUM_HISTORY_SIZE": "compat.execution_api:MAXIMUM_HISTORY_SIZE",
    "full_type_name": "compat.execution_api:full_type_name",
    "format_value": "graph.inputs:format_value",  # the executor's own, for its errors' current_inputs
    "validate_prompt": point("prompt_validation", "compat.execution_api:validate_prompt"),
    "validate_inputs": "compat.execution_api:validate_inputs",
    "get_input_data": point("node_input_data", "compat.execution_api:get_input_data"),
    "resolve_map_node_over_list_results": "compat.execution_api:resolve_map_node_over_list_results",
    "_async_map_node_over_list": point("map_node_over_list", "compat.execution_api:_async_map_node_over_list"),
    "execute": point("node_execute", "compat.execution_api:execute"),
    "ExecutionBlocker": "graph.expansion:ExecutionBlocker",
    "DynamicPrompt": "graph.prompt:DynamicPrompt",
})
