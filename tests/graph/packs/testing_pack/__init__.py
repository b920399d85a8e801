"""A V1-style test node pack: plain Python values, no torch.

Used by tests/graph/*. Each class exercises one part of ComfyUI's V1 contract. Nodes record
their calls in a `CallLog` passed through the class attribute `log` (set by the test fixture),
so tests can see what ran and with which arguments.
"""
from .nodes_basic import NODE_CLASS_MAPPINGS as _BASIC, NODE_DISPLAY_NAME_MAPPINGS as _BASIC_NAMES
from .nodes_flow import NODE_CLASS_MAPPINGS as _FLOW

NODE_CLASS_MAPPINGS = {**_BASIC, **_FLOW}
NODE_DISPLAY_NAME_MAPPINGS = dict(_BASIC_NAMES)
WEB_DIRECTORY = "./js"
