"""ComfyUI's `server` module for node packs: `PromptServer.instance` (compat/prompt_server.py),
`BinaryEventTypes`, and the modules ComfyUI's server.py imports that packs reach through it
(`server.web` is aiohttp.web, `server.uuid` the standard library's)."""
import uuid  # noqa: F401 -- ComfyUI's `server.uuid`

from compat.facade import facade

facade(__name__, {"PromptServer": "compat.prompt_server:PromptServer",
                  "BinaryEventTypes": "compat.prompt_server:BinaryEventTypes",
                  "web": "aiohttp:web"})
