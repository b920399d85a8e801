"""ComfyUI's `comfy_api_nodes.util` download helpers (compat/api_nodes_download.py), called as packs
call them (AlekPet's ChatGLMNode: `await download_url_to_video_output(url)`), against a local
aiohttp server on 127.0.0.1: bytes into a BytesIO / a file / a path, a 503 retried then served,
an HTTP error as `DownloadHTTPError`, images and videos as the engine's values, relative Comfy
API paths, interrupts, progress, connection failures; and `PromptServer.instance.address` /
`.port` (compat/prompt_server.py, ComfyUI's `start_multi_address`).

The `comfy_api_nodes` imports need the package registered as a ComfyUI top-level name
(`"comfy_api_nodes"` in compat/finder.py's `TOP_LEVEL`).
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import socket
import sys
import time
from fractions import Fraction
from types import SimpleNamespace

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from PIL import Image

PAYLOAD = bytes(range(256)) * 4099  # ~1 MiB + a bit: more than one read chunk
RGBA = np.array([[[255, 0, 0, 255], [0, 128, 255, 64], [10, 20, 30, 0]],
                 [[1, 2, 3, 4], [250, 251, 252, 253], [128, 128, 128, 128]]], dtype=np.uint8)  # [2, 3, 4]


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="RGBA").save(buffer, format="PNG")
    return buffer.getvalue()


def _mp4(frames: int = 6, height: int = 32, width: int = 48) -> bytes:
    import torch
    from comfy_core.video import VideoComponents, VideoFromComponents

    images = torch.linspace(0, 1, frames * height * width * 3).reshape(frames, height, width, 3)
    buffer = io.BytesIO()
    VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(12))).save_to(buffer, format="mp4",
                                                                                          codec="h264")
    return buffer.getvalue()


class FileServer:
    """A local server with the routes the tests download from; `hits[path]` counts requests,
    `headers[path]` keeps the last request's headers."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.headers: dict[str, dict] = {}
        self.video = _mp4()
        self.release = asyncio.Event()  # set on close: frees /slow's handler
        self.runner: web.AppRunner | None = None
        self.url = ""

    def _seen(self, request: web.Request) -> int:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        self.headers[request.path] = dict(request.headers)
        return self.hits[request.path]

    async def start(self) -> "FileServer":
        app = web.Application()
        app.router.add_get("/payload.bin", self.payload)
        app.router.add_get("/flaky.bin", self.flaky)
        app.router.add_get("/always503", self.always503)
        app.router.add_get("/missing.png", self.missing)
        app.router.add_get("/image.png", self.image)
        app.router.add_get("/clip.mp4", self.clip)
        app.router.add_get("/cut_once.bin", self.cut_once)
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/moved", self.moved)
        app.router.add_get("/proxy/files/model.glb", self.payload)
        app.router.add_get("/health", self.payload)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def payload(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(body=PAYLOAD)

    async def flaky(self, request: web.Request) -> web.Response:
        if self._seen(request) == 1:  # its body must not end up in the download
            return web.Response(status=503, body=b"busy, try again")
        return web.Response(body=PAYLOAD)

    async def always503(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(status=503, text="busy")

    async def missing(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.json_response({"error": "no such file"}, status=404)

    async def image(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(body=_png(RGBA), content_type="image/png")

    async def clip(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(body=self.video, content_type="video/mp4")

    async def cut_once(self, request: web.Request) -> web.StreamResponse:
        """The first answer promises the whole payload and breaks off after half of it."""
        if self._seen(request) > 1:
            return web.Response(body=PAYLOAD)
        resp = web.StreamResponse()
        resp.content_length = len(PAYLOAD)
        await resp.prepare(request)
        await resp.write(PAYLOAD[: len(PAYLOAD) // 2])
        request.transport.close()
        return resp

    async def slow(self, request: web.Request) -> web.Response:
        self._seen(request)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.release.wait(), 30)
        return web.Response(body=b"late")

    async def moved(self, request: web.Request) -> web.Response:
        self._seen(request)
        raise web.HTTPFound("/payload.bin")

    async def close(self) -> None:
        self.release.set()
        await self.runner.cleanup()


@pytest.fixture
async def files():
    server = await FileServer().start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def util(session):
    """`comfy_api_nodes.util` as packs import it, inside a compat session."""
    return importlib.import_module("comfy_api_nodes.util")


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/nothing"


# -- the helpers, as packs call them ------------------------------------------------------------

async def test_the_video_helper_returns_the_engines_video_as_alekpets_node_calls_it(files, util):
    from comfy_api_nodes.util import download_url_to_video_output  # chatglm_node.py:12

    from comfy_core.video import VideoFromFile

    video = await download_url_to_video_output(str(f"{files.url}/clip.mp4"))
    assert isinstance(video, VideoFromFile)
    assert video.get_dimensions() == (48, 32)
    components = video.get_components()
    assert tuple(components.images.shape) == (6, 32, 48, 3)
    assert components.frame_rate == Fraction(12)
    saved = io.BytesIO()
    video.save_to(saved)  # same container and codec: the downloaded file's streams, copied
    assert saved.getvalue()[4:8] == b"ftyp"


async def test_bytes_land_in_a_bytesio_a_file_object_and_a_path(files, util, tmp_path):
    buffer = io.BytesIO(b"old contents")
    assert await util.download_url_to_bytesio(f"{files.url}/payload.bin", buffer) is None
    assert buffer.tell() == 0 and buffer.getvalue() == PAYLOAD  # rewound, nothing of the old left
    with open(tmp_path / "handle.bin", "wb") as handle:
        await util.download_url_to_bytesio(f"{files.url}/payload.bin", handle)
    assert (tmp_path / "handle.bin").read_bytes() == PAYLOAD
    target = tmp_path / "made" / "by" / "path.bin"
    await util.download_url_to_bytesio(f"{files.url}/payload.bin", target)
    assert target.read_bytes() == PAYLOAD
    fresh = await util.download_url_as_bytesio(f"{files.url}/payload.bin")
    assert fresh.tell() == 0 and fresh.getvalue() == PAYLOAD
    with pytest.raises(ValueError, match="dest must be a path"):
        await util.download_url_to_bytesio(f"{files.url}/payload.bin", 42)


async def test_a_503_is_tried_again_and_only_the_good_body_is_kept(files, util):
    buffer = io.BytesIO()
    started = time.monotonic()
    await util.download_url_to_bytesio(f"{files.url}/flaky.bin", buffer, retry_delay=0.2)
    assert time.monotonic() - started >= 0.2  # waited retry_delay before the second try
    assert files.hits["/flaky.bin"] == 2
    assert buffer.getvalue() == PAYLOAD


async def test_retries_stop_after_max_retries_with_backoff_and_a_typed_error(files, util):
    from comfy_api_nodes.util.download_helpers import DownloadHTTPError

    started = time.monotonic()
    with pytest.raises(DownloadHTTPError) as caught:
        await util.download_url_to_bytesio(f"{files.url}/always503", io.BytesIO(), max_retries=2,
                                           retry_delay=0.1, retry_backoff=3.0)
    assert files.hits["/always503"] == 3  # the first try and two more
    assert time.monotonic() - started >= 0.1 + 0.3  # 0.1 s, then 0.1 * 3
    assert caught.value.status == 503 and str(caught.value) == "Failed to download (HTTP 503)."


async def test_a_404_fails_at_once_as_a_typed_error_that_is_still_an_exception(files, util):
    from comfy_api_nodes.util.download_helpers import DownloadHTTPError

    with pytest.raises(DownloadHTTPError) as caught:
        await util.download_url_to_image_tensor(f"{files.url}/missing.png")
    assert files.hits["/missing.png"] == 1  # 404 is not retried
    assert caught.value.status == 404 and caught.value.url == f"{files.url}/missing.png"
    assert str(caught.value) == "Failed to download (HTTP 404)."
    assert isinstance(caught.value, Exception)  # what ComfyUI raises (`except Exception` catches it)


async def test_a_body_cut_short_is_downloaded_again_without_the_partial_bytes(files, util, tmp_path):
    with open(tmp_path / "cut.bin", "w+b") as handle:
        handle.write(b"HEAD")  # what was there before stays; the partial try does not
        await util.download_url_to_bytesio(f"{files.url}/cut_once.bin", handle, retry_delay=0.01)
    assert files.hits["/cut_once.bin"] == 2
    assert (tmp_path / "cut.bin").read_bytes() == b"HEAD" + PAYLOAD


async def test_redirects_are_followed_unless_refused(files, util):
    buffer = io.BytesIO()
    await util.download_url_to_bytesio(f"{files.url}/moved", buffer)
    assert buffer.getvalue() == PAYLOAD
    from comfy_api_nodes.util.download_helpers import DownloadHTTPError

    with pytest.raises(DownloadHTTPError) as caught:
        await util.download_url_to_bytesio(f"{files.url}/moved", io.BytesIO(), allow_redirects=False)
    assert caught.value.status == 302


async def test_the_image_helper_gives_rgba_pixels_over_255(files, util):
    image = await util.download_url_to_image_tensor(f"{files.url}/image.png")
    assert tuple(image.shape) == (1, 2, 3, 4) and str(image.dtype) == "torch.float32"
    np.testing.assert_allclose(image[0].numpy(), RGBA.astype(np.float64) / 255.0, rtol=0, atol=1e-7)
    from comfy_api_nodes.util import bytesio_to_image_tensor

    rgb = bytesio_to_image_tensor(io.BytesIO(_png(RGBA)), mode="RGB")
    np.testing.assert_allclose(rgb[0].numpy(), RGBA[..., :3].astype(np.float64) / 255.0, rtol=0, atol=1e-7)


async def test_the_3d_helper_returns_a_file3d_and_writes_the_task_file(files, util, session):
    file3d = await util.download_url_to_file_3d(f"{files.url}/payload.bin", ".GLB")
    assert file3d.format == "glb" and not file3d.is_disk_backed
    assert file3d.get_bytes() == PAYLOAD and file3d.get_data().getvalue() == PAYLOAD
    written = await util.download_url_to_file_3d(f"{files.url}/payload.bin", "obj", task_id="task42")
    on_disk = session.env.output_dir / "task42.obj"
    assert on_disk.read_bytes() == PAYLOAD and written.get_bytes() == PAYLOAD
    copy = written.save_to(str(session.env.output_dir / "sub" / "copy.obj"))
    assert open(copy, "rb").read() == PAYLOAD
    assert "format='obj'" in repr(written)


def test_a_disk_backed_file3d_infers_its_format_and_copies_itself(tmp_path):
    from comfy_core.mesh.file3d import File3D

    source = tmp_path / "mesh.OBJ"
    source.write_bytes(b"v 0 0 0\n")
    file3d = File3D(str(source))
    assert file3d.format == "obj" and file3d.is_disk_backed and file3d.get_source() == str(source)
    assert file3d.get_bytes() == b"v 0 0 0\n" and file3d.get_data().getvalue() == b"v 0 0 0\n"
    assert file3d.save_to(str(tmp_path / "out" / "copy.obj")) == str(tmp_path / "out" / "copy.obj")
    assert (tmp_path / "out" / "copy.obj").read_bytes() == b"v 0 0 0\n"
    assert file3d.save_to(str(source)) == str(source) and source.read_bytes() == b"v 0 0 0\n"  # onto itself
    stream = io.BytesIO(b"glTF")
    stream.read()
    in_memory = File3D(stream, ".GLB")
    assert in_memory.get_source() is stream and stream.tell() == 0 and in_memory.format == "glb"
    in_memory.format = ""
    assert in_memory.format == ""


async def test_a_relative_path_needs_cls_and_goes_to_the_comfy_api_base_with_its_headers(files, tmp_path):
    import compat
    from graph.context import NodeContext, reset_current, set_current
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    session = compat.install(env, Registry(), comfy_args={"comfy_api_base": files.url + "/"})
    with session.activate():
        from comfy_api_nodes.util import download_url_as_bytesio, download_url_to_bytesio

        with pytest.raises(ValueError, match="dest must be a path"):  # ComfyUI checks dest first
            await download_url_to_bytesio("/proxy/files/model.glb", None)
        with pytest.raises(ValueError, match="`cls` parameter is required"):
            await download_url_as_bytesio("/proxy/files/model.glb")
        assert files.hits == {}
        node = SimpleNamespace(hidden=SimpleNamespace(auth_token_comfy_org="tok-1", api_key_comfy_org="key-1",
                                                      comfy_usage_source=None))
        token = set_current(NodeContext(prompt_id="p-7", node_id="3", display_node_id="3", list_index=None,
                                        env=env))
        try:
            data = await download_url_as_bytesio("/proxy/files/model.glb", cls=node)
        finally:
            reset_current(token)
        assert data.getvalue() == PAYLOAD
        sent = files.headers["/proxy/files/model.glb"]
        assert sent["Authorization"] == "Bearer tok-1" and "X-API-KEY" not in sent
        assert sent["Comfy-Usage-Source"] == "comfyui-api" and sent["Comfy-Job-Id"] == "p-7"
        from compat.version import COMFYUI_VERSION

        assert sent["Comfy-Core-Version"] == COMFYUI_VERSION
        # an absolute URL never carries the node's credentials
        await download_url_as_bytesio(f"{files.url}/payload.bin", cls=node)
        assert "Authorization" not in files.headers["/payload.bin"]
        from comfy_api_nodes.util._helpers import default_base_url, get_auth_header

        assert default_base_url() == files.url
        keyed = SimpleNamespace(hidden=SimpleNamespace(auth_token_comfy_org=None, api_key_comfy_org="key-1"))
        assert get_auth_header(keyed) == {"X-API-KEY": "key-1"}


def test_the_comfy_api_base_defaults_to_comfyuis(util):
    from comfy_api_nodes.util._helpers import default_base_url, get_comfy_api_headers

    assert default_base_url() == "https://api.comfy.org"
    bare = SimpleNamespace(hidden=SimpleNamespace(auth_token_comfy_org=None, api_key_comfy_org=None,
                                                  comfy_usage_source="comfy-desktop"))
    headers = get_comfy_api_headers(bare)
    assert headers["Comfy-Usage-Source"] == "comfy-desktop"
    assert "Authorization" not in headers and "Comfy-Job-Id" not in headers


def test_presigned_urls_keep_their_encoding(util):
    from comfy_api_nodes.util._helpers import to_aiohttp_url

    signed = "https://bucket.example/a%2Fb.mp4?X-Sig=ab%3D%3D"
    assert str(to_aiohttp_url(signed)) == signed
    assert str(to_aiohttp_url("https://h.example/a b.png")) == "https://h.example/a%20b.png"


def _interrupting_context(env, flag):
    from graph.context import NodeContext

    reports = []
    ctx = NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env,
                      report=lambda v, m, p: reports.append((v, m)), is_interrupted=lambda: flag["on"])
    return ctx, reports


async def test_an_interrupt_stops_a_waiting_download_and_a_retry_wait(files, util, session):
    from comfy_api_nodes.util.common_exceptions import ProcessingInterrupted
    from graph.context import reset_current, set_current

    flag = {"on": False}
    ctx, _ = _interrupting_context(session.env, flag)
    token = set_current(ctx)
    try:
        asyncio.get_running_loop().call_later(0.3, flag.update, {"on": True})
        started = time.monotonic()
        with pytest.raises(ProcessingInterrupted, match="Task cancelled"):
            await util.download_url_to_bytesio(f"{files.url}/slow", io.BytesIO())
        assert time.monotonic() - started < 5  # the server would answer after 30 s
        flag["on"] = False
        asyncio.get_running_loop().call_later(0.3, flag.update, {"on": True})
        started = time.monotonic()
        with pytest.raises(ProcessingInterrupted):
            await util.download_url_to_bytesio(f"{files.url}/always503", io.BytesIO(), retry_delay=30)
        assert time.monotonic() - started < 5
        from comfy_api_nodes.util._helpers import is_processing_interrupted, sleep_with_interrupt

        assert is_processing_interrupted() is True
        with pytest.raises(ProcessingInterrupted):
            await sleep_with_interrupt(10, None)
    finally:
        reset_current(token)


async def test_progress_reaches_the_running_node(files, util, session):
    from graph.context import reset_current, set_current

    ctx, reports = _interrupting_context(session.env, {"on": False})
    token = set_current(ctx)
    try:
        await util.download_url_to_bytesio(f"{files.url}/payload.bin", io.BytesIO())
    finally:
        reset_current(token)
    assert reports and reports[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert [v for v, _ in reports] == sorted(v for v, _ in reports)


async def test_sleep_with_interrupt_reports_elapsed_time(util):
    from comfy_api_nodes.util._helpers import sleep_with_interrupt

    seen = []
    started = time.monotonic()
    await sleep_with_interrupt(0.3, "node", "Waiting", started, display_callback=lambda c, l, s: seen.append((c, l, s)))
    assert time.monotonic() - started >= 0.3
    assert seen and all(c == "node" and l == "Waiting" and s == 0 for c, l, s in seen)


async def test_a_dead_host_is_a_server_error_when_the_internet_answers_else_a_local_one(files, util, monkeypatch):
    import compat.api_nodes_download as impl
    from comfy_api_nodes.util.common_exceptions import ApiServerError, LocalNetworkError, NetworkError

    dead = _closed_port_url()
    monkeypatch.setattr(impl, "CONNECTIVITY_PROBES", (f"{files.url}/payload.bin",))
    with pytest.raises(ApiServerError) as caught:
        await util.download_url_to_bytesio(dead, io.BytesIO(), max_retries=1, retry_delay=0.01)
    assert isinstance(caught.value, NetworkError) and isinstance(caught.value.__cause__, aiohttp.ClientError)
    monkeypatch.setattr(impl, "CONNECTIVITY_PROBES", (_closed_port_url(),))
    with pytest.raises(LocalNetworkError):
        await util.download_url_to_bytesio(dead, io.BytesIO(), max_retries=0)
    from comfy_api_nodes.util._helpers import diagnose_connectivity

    monkeypatch.setattr(impl, "CONNECTIVITY_PROBES", (f"{files.url}/payload.bin",))
    monkeypatch.setattr(impl, "default_base_url", lambda: files.url)
    assert await diagnose_connectivity() == {"internet_accessible": True, "api_accessible": True}


def test_the_other_common_exceptions(util):
    from comfy_api_nodes.util.common_exceptions import ApiResponseError, NetworkError, ProcessingInterrupted

    error = ApiResponseError("bad answer", sensitive_values=("secret",))
    assert str(error) == "bad answer" and error.sensitive_values == ("secret",)
    assert not issubclass(ProcessingInterrupted, NetworkError)
    from comfy_api_nodes.util.conversions import bytesio_to_image_tensor

    assert bytesio_to_image_tensor is util.bytesio_to_image_tensor


def test_importing_the_package_touches_no_network(session, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the network was touched at import")

    for name in [m for m in sys.modules if m == "compat.api_nodes_download" or m.startswith("comfy_api_nodes")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    from comfy_api_nodes.util import (download_url_as_bytesio, download_url_to_bytesio,  # noqa: F401
                                      download_url_to_file_3d, download_url_to_image_tensor,
                                      download_url_to_video_output)
    import comfy_api_nodes.util.common_exceptions  # noqa: F401
    import comfy_api_nodes.util.download_helpers  # noqa: F401


PACK = """
from comfy_api_nodes.util import download_url_to_video_output


class FetchVideoSize:
    CATEGORY = "test"
    RETURN_TYPES = ("INT", "INT")
    FUNCTION = "fetch"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"url": ("STRING", {"default": ""})}}

    async def fetch(self, url):  # an async V1 function awaiting the helper, as ChatGLMVideoGenerateNode
        video = await download_url_to_video_output(url)
        width, height = video.get_dimensions()
        return {"ui": {"size": [width, height]}, "result": (width, height)}


NODE_CLASS_MAPPINGS = {"FetchVideoSize": FetchVideoSize}
"""


async def test_a_pack_node_downloads_a_video_while_the_server_runs_its_prompt(files, tmp_path):
    from tests.compat.compat_harness import start_pack_server

    packs = tmp_path / "packs"
    (packs / "fetch_pack").mkdir(parents=True)
    (packs / "fetch_pack" / "__init__.py").write_text(PACK)
    server = await start_pack_server(tmp_path / "base", custom_node_dirs=(packs,))
    try:
        status, body = await server.post_prompt({"1": {"class_type": "FetchVideoSize",
                                                       "inputs": {"url": f"{files.url}/clip.mp4"}}})
        assert status == 200, body
        entry = await server.wait_history(body["prompt_id"], timeout=60)
        assert entry["status"]["status_str"] == "success", entry["status"]
        assert entry["outputs"]["1"]["size"] == [48, 32]
        assert files.hits["/clip.mp4"] == 1
    finally:
        await server.close()


# -- PromptServer.instance.address / .port (A11) -------------------------------------------------

async def test_prompt_server_address_and_port_once_the_server_listens(tmp_path):
    from tests.web.web_harness import free_port
    from web.app import start_server
    from web.bootstrap import build_state
    from web.config import ServerConfig

    port = free_port()
    state = build_state(ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=port,
                                     disable_all_custom_nodes=True))
    from server import PromptServer

    instance = PromptServer.instance
    assert getattr(instance, "address", None) is None  # ComfyUI's server has none before it listens
    with pytest.raises(AttributeError, match="once the server listens"):
        instance.port  # noqa: B018
    runner, urls = await start_server(state, frontend=False)
    try:
        assert PromptServer.instance.address == "127.0.0.1" and PromptServer.instance.port == port
        assert urls == [f"http://{PromptServer.instance.address}:{PromptServer.instance.port}"]
        # the URL AlekPet's node builds from them reaches this server
        async with aiohttp.ClientSession() as client:
            url = f"http://{PromptServer.instance.address}:{PromptServer.instance.port}/system_stats"
            async with client.get(url) as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()
