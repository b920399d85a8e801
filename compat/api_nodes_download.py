"""ComfyUI's `comfy_api_nodes.util` download helpers for node packs, over aiohttp and the engine's
own video and image values.

Behaviour of ComfyUI's comfy_api_nodes/util/download_helpers.py (today's), with the helpers it
uses from util/_helpers.py, util/common_exceptions.py and util/conversions.py:

- `download_url_to_bytesio(url, dest, *, timeout=None, max_retries=5, retry_delay=1.0,
  retry_backoff=2.0, cls=None, allow_redirects=True)` streams `url` into `dest` (a BytesIO,
  rewound to 0 afterwards; a binary file-like object; or a path, opened `wb`, its folder made).
  An answer of 408, 429, 500, 502, 503 or 504, and a connection error, is tried again after
  `retry_delay` seconds, the delay multiplied by `retry_backoff` each time, at most `max_retries`
  more times; what a failed try wrote is discarded. Any other status of 300 or more (a redirect
  only under `allow_redirects=False`) fails at once. A relative URL (no scheme, no host) needs
  `cls` (the calling V3 node class): it is joined to the Comfy API base (`--comfy-api-base`,
  default https://api.comfy.org) and sent with the node's Comfy API headers.
- `download_url_to_image_tensor` (`[1, H, W, 4]` float in 0..1, ComfyUI's RGBA conversion),
  `download_url_to_video_output` (a `VideoFromFile` over the downloaded BytesIO: the engine's
  VIDEO, comfy_core/video/), `download_url_as_bytesio`, `download_url_to_file_3d` (a `File3D`,
  comfy_core/mesh/file3d.py; with `task_id` also written to `<output>/<task_id>.<format>`).

Errors are ComfyUI's: an HTTP failure raises `DownloadHTTPError` (an `Exception`, as ComfyUI's
plain one, carrying `status` and `url`, with ComfyUI's message "Failed to download (HTTP n).");
a connection that keeps failing raises `LocalNetworkError` when no well-known site answers
either, else `ApiServerError`; an interrupt of the running prompt (the editor's Interrupt)
raises `ProcessingInterrupted`, checked at least every `POLL_S` seconds while connecting,
reading and waiting to retry. The download reports its progress on the running node through
`comfy.utils.ProgressBar` (compat/progress.py) when the server sent a Content-Length.

Importing this module touches no network; only the calls do. ComfyUI's request log files
(util/request_logger.py) are not written: requests are logged at DEBUG level instead.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from io import BytesIO
from pathlib import Path
from typing import IO, Any, Awaitable, Callable, TypeVar
from urllib.parse import urljoin, urlparse

import aiohttp
from yarl import URL

from comfy_core.mesh.file3d import File3D

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # ComfyUI's _RETRY_STATUS
DEFAULT_API_BASE = "https://api.comfy.org"  # ComfyUI's --comfy-api-base default
CHUNK_BYTES = 1 << 20  # ComfyUI reads 1 MiB at a time
POLL_S = 0.5  # how often a wait looks at the interrupt flag (ComfyUI: 1 s)
# Sites that answer from anywhere with a working connection (ComfyUI's diagnose_connectivity:
# Google, and Baidu for mainland China where Google is blocked).
CONNECTIVITY_PROBES = ("https://www.google.com", "https://www.baidu.com")
PROBE_TIMEOUT_S = 5.0

T = TypeVar("T")


# -- ComfyUI's util/common_exceptions.py ------------------------------------------------------------
class NetworkError(Exception):
    """A network failure (ComfyUI's base of LocalNetworkError and ApiServerError)."""


class LocalNetworkError(NetworkError):
    """This machine cannot reach the network."""


class ApiServerError(NetworkError):
    """The remote service is unreachable while the network works."""


class ApiResponseError(Exception):
    """A bad answer from an API; `sensitive_values` are strings a logger must mask."""

    def __init__(self, message: str, sensitive_values: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.sensitive_values = sensitive_values


class ProcessingInterrupted(Exception):
    """The running prompt was interrupted while an API helper waited."""


class DownloadHTTPError(Exception):
    """A download answered with HTTP `status` (not in ComfyUI's module, where this is a plain
    `Exception` with the same message: catching `Exception` still catches it)."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"Failed to download (HTTP {status}).")
        self.status = status
        self.url = url


# -- ComfyUI's util/_helpers.py (what the downloads use) ------------------------------------------
def is_processing_interrupted() -> bool:
    """True when the prompt running this node was interrupted (False outside a node)."""
    from compat.devices import processing_interrupted

    return processing_interrupted()


async def sleep_with_interrupt(seconds: float, node_cls: Any = None, label: str | None = None,
                               start_ts: float | None = None, *,
                               display_callback: Callable[[Any, str, int], None] | None = None) -> None:
    """Sleep `seconds`, raising `ProcessingInterrupted` as soon as the prompt is interrupted;
    with `label`, `start_ts` (a `time.monotonic()` value) and `display_callback`, call
    `display_callback(node_cls, label, elapsed_seconds)` at each slice."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        if is_processing_interrupted():
            raise ProcessingInterrupted("Task cancelled")
        now = loop.time()
        if display_callback is not None and label and start_ts is not None:
            import time

            with contextlib.suppress(Exception):
                display_callback(node_cls, label, int(time.monotonic() - start_ts))
        if now >= end:
            return
        await asyncio.sleep(min(POLL_S, end - now))


def default_base_url() -> str:
    """The Comfy API base: the server's `--comfy-api-base`, else https://api.comfy.org."""
    from compat.active import CompatNotInstalledError
    from compat.cli_args import args

    try:
        base = getattr(args, "comfy_api_base", None) or DEFAULT_API_BASE
    except CompatNotInstalledError:  # no session (a library user): ComfyUI's default
        base = DEFAULT_API_BASE
    return str(base).rstrip("/")


def _hidden(node_cls: Any, name: str) -> Any:
    return getattr(getattr(node_cls, "hidden", None), name, None)


def get_auth_header(node_cls: Any) -> dict[str, str]:
    """`Authorization: Bearer <token>` from the prompt's Comfy sign-in token, else `X-API-KEY`
    from its Comfy API key (the node's hidden inputs), else nothing."""
    token = _hidden(node_cls, "auth_token_comfy_org")
    if token:
        return {"Authorization": f"Bearer {token}"}
    key = _hidden(node_cls, "api_key_comfy_org")
    return {"X-API-KEY": key} if key else {}


def get_comfy_api_headers(node_cls: Any) -> dict[str, str]:
    """The headers of a Comfy API request made for `node_cls`: its credentials, the usage
    source (the submitting client, default "comfyui-api"), this server's ComfyUI version and the
    running prompt's id. Only for relative (Comfy API) URLs: they carry the credentials."""
    from compat.version import COMFYUI_VERSION
    from graph.context import current

    headers = {**get_auth_header(node_cls),
               "Comfy-Usage-Source": _hidden(node_cls, "comfy_usage_source") or "comfyui-api",
               "Comfy-Core-Version": COMFYUI_VERSION}
    ctx = current()
    if ctx is not None:
        headers["Comfy-Job-Id"] = ctx.prompt_id
    return headers


_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def to_aiohttp_url(url: str) -> URL:
    """`url` as yarl's URL, kept byte for byte when it is already percent-encoded (a signed or
    presigned URL whose signature covers its encoding), otherwise quoted by yarl."""
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        return URL(url)
    if _PERCENT_ESCAPE.search(url) and not _BAD_PERCENT.search(url):
        return URL(url, encoded=True)
    return URL(url)


async def diagnose_connectivity() -> dict[str, bool]:
    """`{"internet_accessible", "api_accessible"}`: whether any `CONNECTIVITY_PROBES` site
    answers below 500, then whether the Comfy API's `/health` does."""
    results = {"internet_accessible": False, "api_accessible": False}

    async def answers(session: aiohttp.ClientSession, url: str) -> bool:
        try:
            async with session.get(url) as resp:
                return resp.status < 500
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            return False

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as session:
        probes = [asyncio.ensure_future(answers(session, url)) for url in CONNECTIVITY_PROBES]
        try:
            for finished in asyncio.as_completed(probes):
                if await finished:
                    results["internet_accessible"] = True
                    break
        finally:
            for probe in probes:
                probe.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
        if results["internet_accessible"]:
            parsed = urlparse(default_base_url())
            results["api_accessible"] = await answers(session, f"{parsed.scheme}://{parsed.netloc}/health")
    return results


# -- ComfyUI's util/conversions.py (what the downloads use) ---------------------------------------
def bytesio_to_image_tensor(image_bytesio: BytesIO, mode: str = "RGBA") -> Any:
    """An encoded image as IMAGE `[1, H, W, C]` float32 in 0..1, converted to PIL `mode`
    (RGBA by default: C = 4, as ComfyUI)."""
    import numpy as np
    import torch
    from PIL import Image

    image = Image.open(image_bytesio).convert(mode)
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    if pixels.ndim == 2:  # single-channel modes ("L"): keep a channel axis
        pixels = pixels[..., None]
    return torch.from_numpy(np.ascontiguousarray(pixels)).unsqueeze(0)


# -- the downloads ------------------------------------------------------------------------------
async def _interruptible(awaitable: Awaitable[T]) -> T:
    """Await `awaitable`, raising `ProcessingInterrupted` (and cancelling it) when the prompt is
    interrupted meanwhile."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if is_processing_interrupted():
                raise ProcessingInterrupted("Task cancelled")
    except asyncio.CancelledError:
        raise ProcessingInterrupted("Task cancelled") from None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class _Sink:
    """Where one try writes: a path opened on success, or the caller's stream, put back to
    where it was before each try (a retried download starts again at byte 0)."""

    def __init__(self, dest: BytesIO | IO[bytes] | str | Path) -> None:
        if not isinstance(dest, (str, Path)) and not hasattr(dest, "write"):
            raise ValueError("dest must be a path (str|Path) or a binary-writable object providing .write().")
        self.dest = dest
        self.path = Path(dest) if isinstance(dest, (str, Path)) else None
        self.start: int | None = None
        if self.path is None and not isinstance(dest, BytesIO):
            with contextlib.suppress(Exception):
                if dest.seekable():
                    self.start = dest.tell()

    def reset(self) -> None:
        if isinstance(self.dest, BytesIO):
            self.dest.seek(0)
            self.dest.truncate(0)
        elif self.start is not None:
            self.dest.seek(self.start)
            self.dest.truncate()

    @contextlib.contextmanager
    def opened(self) -> Any:
        if self.path is None:
            yield self.dest
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as handle:
            yield handle

    def finish(self) -> None:
        if isinstance(self.dest, BytesIO):
            self.dest.seek(0)


def _absolute(url: str, cls: Any) -> tuple[str, dict[str, str]]:
    parsed = urlparse(url)
    if parsed.scheme or parsed.netloc:
        return url, {}
    if cls is None:
        raise ValueError("For relative 'cloud' paths, the `cls` parameter is required.")
    return urljoin(default_base_url() + "/", url.lstrip("/")), get_comfy_api_headers(cls)


async def _stream_body(resp: aiohttp.ClientResponse, sink: Any) -> int:
    """Copy the body into `sink` in chunks, reporting progress on the running node."""
    from compat.progress import ProgressBar

    total = resp.content_length
    bar = ProgressBar(total) if total else None
    written = 0
    while True:
        chunk = await _interruptible(resp.content.read(CHUNK_BYTES))
        if is_processing_interrupted():
            raise ProcessingInterrupted("Task cancelled")
        if not chunk:
            return written
        sink.write(chunk)
        written += len(chunk)
        if bar is not None:
            bar.update_absolute(written)


async def download_url_to_bytesio(url: str, dest: BytesIO | IO[bytes] | str | Path | None, *,
                                  timeout: float | None = None, max_retries: int = 5, retry_delay: float = 1.0,
                                  retry_backoff: float = 2.0, cls: Any = None, allow_redirects: bool = True) -> None:
    """Stream `url` into `dest` (see the module docstring for retries, relative URLs and errors)."""
    sink = _Sink(dest)
    url, headers = _absolute(url, cls)
    delay = retry_delay
    attempt = 0
    while True:
        attempt += 1
        sink.reset()
        log.debug("GET %s (try %d)", url, attempt)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
                resp = await _interruptible(session.get(to_aiohttp_url(url), headers=headers,
                                                        allow_redirects=allow_redirects))
                async with resp:
                    if resp.status >= 300:
                        log.debug("GET %s: HTTP %d", url, resp.status)
                        if resp.status in RETRY_STATUS and attempt <= max_retries:
                            await sleep_with_interrupt(delay, cls)
                            delay *= retry_backoff
                            continue
                        raise DownloadHTTPError(resp.status, url)
                    with sink.opened() as out:
                        written = await _stream_body(resp, out)
            sink.finish()
            log.debug("GET %s: %d bytes", url, written)
            return
        except (aiohttp.ClientError, OSError) as exc:  # OSError: refused, reset, and TimeoutError
            if attempt <= max_retries:
                log.debug("GET %s: %s: %s (will retry)", url, type(exc).__name__, exc)
                await sleep_with_interrupt(delay, cls)
                delay *= retry_backoff
                continue
            diagnosis = await diagnose_connectivity()
            if not diagnosis["internet_accessible"]:
                raise LocalNetworkError("Unable to connect to the network. Please check your internet "
                                        "connection and try again.") from exc
            raise ApiServerError("The remote service appears unreachable at this time.") from exc


async def download_url_to_image_tensor(url: str, *, timeout: float | None = None, cls: Any = None,
                                       allow_redirects: bool = True) -> Any:
    """The image at `url` as IMAGE `[1, H, W, 4]` (see `bytesio_to_image_tensor`)."""
    result = BytesIO()
    await download_url_to_bytesio(url, result, timeout=timeout, cls=cls, allow_redirects=allow_redirects)
    return bytesio_to_image_tensor(result)


async def download_url_to_video_output(video_url: str, *, timeout: float | None = None, max_retries: int = 5,
                                       cls: Any = None, allow_redirects: bool = True) -> Any:
    """The video at `video_url` as a VIDEO (`VideoFromFile` over the downloaded bytes)."""
    from comfy_core.video import VideoFromFile

    result = BytesIO()
    await download_url_to_bytesio(video_url, result, timeout=timeout, max_retries=max_retries, cls=cls,
                                  allow_redirects=allow_redirects)
    return VideoFromFile(result)


async def download_url_as_bytesio(url: str, *, timeout: float | None = None, cls: Any = None) -> BytesIO:
    """The contents of `url` in a new BytesIO at offset 0."""
    result = BytesIO()
    await download_url_to_bytesio(url, result, timeout=timeout, cls=cls)
    return result


async def download_url_to_file_3d(url: str, file_format: str, *, task_id: str | None = None,
                                  timeout: float | None = None, max_retries: int = 5, cls: Any = None,
                                  allow_redirects: bool = True) -> File3D:
    """The 3-D file at `url` in memory as a `File3D` of `file_format`; with `task_id` it is also
    written to `<output directory>/<task_id>.<format>` (ComfyUI's older behaviour)."""
    file_format = file_format.lstrip(".").lower()
    data = BytesIO()
    await download_url_to_bytesio(url, data, timeout=timeout, max_retries=max_retries, cls=cls,
                                  allow_redirects=allow_redirects)
    if task_id is not None:
        from compat.folders import get_output_directory

        (Path(get_output_directory()) / f"{task_id}.{file_format}").write_bytes(data.getvalue())
        data.seek(0)
    return File3D(data, file_format=file_format)
