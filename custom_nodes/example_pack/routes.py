"""The example pack's HTTP route: GET /example_pack/info (also under /api)."""
from aiohttp import web

import folder_paths
from server import PromptServer


@PromptServer.instance.routes.get("/example_pack/info")
async def example_pack_info(request):
    return web.json_response({"pack": "example_pack",
                              "checkpoints": folder_paths.get_filename_list("checkpoints")})
