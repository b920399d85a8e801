"""ComfyUI's `comfy_execution.graph_utils` for node packs (compat/graph_builder.py)."""
from compat.graph_builder import ExecutionBlocker, GraphBuilder, Node, add_graph_prefix, is_link
