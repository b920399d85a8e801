"""ComfyUI's top-level `execution` module for node packs (compat/execution_api.py; the queue
class is compat/pack_queue.py's, what `PromptServer.instance.prompt_queue` is)."""
from compat.facade import facade

facade(__name__, {
    "PromptExecutor": "compat.execution_api:PromptExecutor",
    "PromptQueue": "compat.pack_queue:PackPromptQueue",
    "ExecutionResult": "compat.execution_api:ExecutionResult",
    "CacheType": "compat.execution_api:CacheType",
    "DuplicateNodeError": "compat.execution_api:DuplicateNodeError",
    "NodeExecutionError": "compat.execution_api:NodeExecutionError",
    "SENSITIVE_EXTRA_DATA_KEYS": "compat.execution_api:SENSITIVE_EXTRA_DATA_KEYS",
    "MAXIMUM_HISTORY_SIZE": "compat.execution_api:MAXIMUM_HISTORY_SIZE",
    "full_type_name": "compat.execution_api:full_type_name",
    "validate_prompt": "compat.execution_api:validate_prompt",
    "validate_inputs": "compat.execution_api:validate_inputs",
    "get_input_data": "compat.execution_api:get_input_data",
    "ExecutionBlocker": "graph.expansion:ExecutionBlocker",
    "DynamicPrompt": "graph.prompt:DynamicPrompt",
})
