"""Example node pack, written the way ComfyUI pack authors write them.

It shows each part of the contract packs rely on:

* V1 nodes (`nodes_v1.py`): `INPUT_TYPES` / `RETURN_TYPES` / `FUNCTION` classes, a
  `comfy.utils.ProgressBar`, a custom WebSocket event (`PromptServer.instance.send_sync`) and a
  node that expands into a subgraph with `comfy_execution.graph_utils.GraphBuilder`;
* one V3 node (`nodes_v3.py`), found through `comfy_entrypoint()`;
* a custom HTTP route (`routes.py`): GET /example_pack/info;
* a `WEB_DIRECTORY` script (`js/example_pack.js`) the browser editor loads.
"""
from .nodes_v1 import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
from .nodes_v3 import comfy_entrypoint
from . import routes  # noqa: F401 -- registers the pack's HTTP route

WEB_DIRECTORY = "./js"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "comfy_entrypoint"]
