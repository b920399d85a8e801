"""ComfyUI's `comfy_execution.utils`: the executing node's context (compat/execution_context.py)."""
from compat.execution_context import (CurrentNodeContext, ExecutionContext, current_executing_context,  # noqa: F401
                                      get_executing_context)
