"""ComfyUI's `comfy_execution.graph` names for node packs (our graph engine's own classes)."""
from graph.errors import DependencyCycleError, NodeInputError
from graph.expansion import ExecutionBlocker
from graph.prompt import DynamicPrompt
