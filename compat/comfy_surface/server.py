"""ComfyUI's `server` module for node packs: `PromptServer.instance` (compat/prompt_server.py)."""
from compat.prompt_server import BinaryEventTypes, PromptServer
