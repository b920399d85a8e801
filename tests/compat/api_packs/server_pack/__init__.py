"""A fixture pack using ComfyUI's server-side API the way ComfyUI-Manager, KJNodes, Easy-Use and
Impact-Pack do: routes and a middleware on `PromptServer.instance.app` at import time, the
prompt queue read while a prompt runs, custom WebSocket events, `execution`'s validation and
executor names, `latent_preview`'s previewers on a latent, and ComfyUI's top-level `utils`."""
import threading
from pathlib import Path

import numpy as np
import torch
from aiohttp import web

import execution
import latent_preview
import nodes
import server
import utils.install_util
import utils.json_util
from comfy.cli_args import args
from comfy_api import feature_flags
from server import BinaryEventTypes, PromptServer

HERE = Path(__file__).resolve().parent
# Impact-Pack's way instead of WEB_DIRECTORY: straight into ComfyUI's table of extension folders.
nodes.EXTENSION_WEB_DIRS["server_pack"] = str(HERE / "js")
nodes.EXTENSION_WEB_DIRS["server_pack_extra"] = str(HERE / "extra_js")

# Impact-Pack keeps the executor's error handler to wrap it.
ORIGINAL_HANDLE_EXECUTION_ERROR = execution.PromptExecutor.handle_execution_error
assert callable(ORIGINAL_HANDLE_EXECUTION_ERROR)

instance = PromptServer.instance
app = instance.app
FROZEN_AT_IMPORT = app.router.frozen  # KJNodes checks this before adding routes


@web.middleware
async def tag_responses(request, handler):
    """A pack middleware (as Easy-Use and Manager add): tags every response."""
    response = await handler(request)
    response.headers["X-Server-Pack"] = "seen"
    return response


app.middlewares.append(tag_responses)


async def direct(request):
    return web.json_response({"direct": True, "frozen_at_import": FROZEN_AT_IMPORT})


# KJNodes' and Easy-Use's way: routes and static folders straight on the application.
app.add_routes([web.get("/server_pack/direct", direct), server.web.static("/server_pack_static", HERE / "static")])

RELEASE = threading.Event()


@instance.routes.get("/server_pack/queue")
async def queue_state(request):
    queue = instance.prompt_queue
    running, pending = queue.get_current_queue()
    return web.json_response({"remaining": queue.get_tasks_remaining(), "running": [item[1] for item in running],
                              "pending": [item[1] for item in pending], "number": instance.number,
                              "currently_running": [item[1] for item in queue.currently_running.values()]})


@instance.routes.post("/server_pack/release")
async def release(request):
    RELEASE.set()
    return web.json_response({"released": True})


@instance.routes.post("/server_pack/delete")
async def delete(request):
    body = await request.json()
    removed = instance.prompt_queue.delete_queue_item(lambda item: item[1] == body["prompt_id"])
    return web.json_response({"removed": removed})


@instance.routes.post("/server_pack/validate")
async def validate(request):
    body = await request.json()
    ok, error, outputs, node_errors = await execution.validate_prompt("check", body["prompt"], None)
    return web.json_response({"ok": ok, "error": error, "outputs": outputs, "node_errors": node_errors})


@instance.routes.get("/server_pack/utils")
async def utils_info(request):
    return web.json_response({"requirements": utils.install_util.get_missing_requirements_message(),
                              "merged": utils.json_util.merge_json_recursive({"a": [1], "b": {"c": 1}},
                                                                            {"a": [2], "b": {"d": 2}})})


@instance.routes.get("/server_pack/history/{prompt_id}")
async def history(request):
    return web.json_response(instance.prompt_queue.get_history(request.match_info["prompt_id"]))


class ServerPackWait:
    """Waits for POST /server_pack/release, then reports the queue as seen from the node and
    sends a custom event to its client."""

    CATEGORY = "server_pack"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0})}, "hidden": {"unique_id": "UNIQUE_ID"}}

    @classmethod
    def IS_CHANGED(cls, value, unique_id=None):
        return float("nan")  # run every time

    def run(self, value, unique_id=None):
        import comfy.model_management

        while not RELEASE.wait(0.02):
            comfy.model_management.throw_exception_if_processing_interrupted()
        RELEASE.clear()  # after waking: a release posted before this call started still counts
        queue = PromptServer.instance.prompt_queue
        seen = {"remaining": queue.get_tasks_remaining(), "last_node": PromptServer.instance.last_node_id,
                "client": PromptServer.instance.client_id}
        PromptServer.instance.send_sync("server_pack.event", {"node": unique_id, "value": value, **seen},
                                        PromptServer.instance.client_id)
        return {"ui": {"seen": [seen]}, "result": (value,)}


class ServerPackPreview:
    """A seeded random latent through `latent_preview`: the server's previewer
    (`get_previewer`) and an explicit `Latent2RGBPreviewer` on SD1's factors."""

    CATEGORY = "server_pack"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0}), "size": ("INT", {"default": 4})}}

    def run(self, seed, size):
        from comfy_core.models.latent_formats import sd15_latent_format

        fmt = sd15_latent_format()
        x0 = torch.randn((1, 4, size, size), generator=torch.Generator().manual_seed(seed))
        server_previewer = latent_preview.get_previewer("cpu", fmt)
        explicit = latent_preview.Latent2RGBPreviewer(fmt.latent_rgb_factors, fmt.latent_rgb_factors_bias)
        kind, image, max_size = explicit.decode_latent_to_preview_image("PNG", x0)
        pixels = np.asarray(image).reshape(-1, 3).tolist()
        ui = {"kind": [kind], "max_size": [max_size], "pixels": pixels,
              "server_previewer": [type(server_previewer).__name__],
              "same_as_server": [server_previewer is not None
                                 and np.asarray(server_previewer.decode_latent_to_preview(x0)).reshape(-1, 3).tolist() == pixels],
              "method": [args.preview_method.value]}
        # KJNodes' preview path: an unencoded PIL preview, with metadata when the client asked for it
        instance = PromptServer.instance
        with_meta = feature_flags.supports_feature(instance.sockets_metadata, instance.client_id,
                                                   "supports_preview_metadata")
        if with_meta:
            instance.send_sync(BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA, (("PNG", image, None), {"node_id": "1"}),
                               instance.client_id)
        else:
            instance.send_sync(BinaryEventTypes.UNENCODED_PREVIEW_IMAGE, ("PNG", image, None), instance.client_id)
        ui["client_metadata"] = [with_meta]
        out = torch.tensor(pixels, dtype=torch.float32).reshape(1, size, size, 3) / 255.0
        return {"ui": ui, "result": (out,)}


NODE_CLASS_MAPPINGS = {"ServerPackWait": ServerPackWait, "ServerPackPreview": ServerPackPreview}
