"""The editor's video and audio previews over HTTP: a video uploaded through /upload/image (as
the LoadVideo widget does), a LoadVideo -> GetVideoComponents -> CreateVideo -> SaveVideo prompt
run by the server (the history holds ComfyUI's `images` + `animated` record), `/view` answering
with video/audio content types and byte ranges (206, Content-Range, the file's slice), and a
corrupt upload refused at /prompt with a 400 naming the file."""
from __future__ import annotations

import io
import math
from fractions import Fraction

import av
import pytest
import torch

from comfy_core.video import VideoComponents, VideoFromComponents
from graph.registry import Registry
from nodes import register_builtin_nodes
from tests.web.web_harness import start_test_server


@pytest.fixture
async def video_server(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    srv = await start_test_server(tmp_path, registry=registry)
    try:
        yield srv
    finally:
        await srv.close()


def small_mp4() -> bytes:
    t = torch.arange(8000) / 16000
    audio = {"waveform": (0.2 * torch.sin(2 * math.pi * 440 * t)).expand(1, 1, -1).contiguous(), "sample_rate": 16000}
    frames = torch.linspace(0, 1, 48)[None, None, :, None].expand(9, 32, 48, 3).contiguous()
    buffer = io.BytesIO()
    VideoFromComponents(VideoComponents(images=frames, frame_rate=Fraction(8), audio=audio)).save_to(buffer)
    return buffer.getvalue()


async def upload(server, data: bytes, name: str) -> dict:
    boundary = "----videoboundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
            f"Content-Type: video/mp4\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    async with server.session.post(f"{server.url}/upload/image", data=body,
                                   headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}) as resp:
        assert resp.status == 200
        return await resp.json()


PROMPT = {
    "1": {"class_type": "LoadVideo", "inputs": {"file": "clip.mp4"}},
    "2": {"class_type": "GetVideoComponents", "inputs": {"video": ["1", 0]}},
    "3": {"class_type": "CreateVideo", "inputs": {"images": ["2", 0], "fps": 8.0, "audio": ["2", 1]}},
    "4": {"class_type": "SaveVideo", "inputs": {"video": ["3", 0], "filename_prefix": "video/ComfyUI",
                                                "format": "auto", "codec": "auto"}},
}


async def test_an_uploaded_video_runs_through_the_video_nodes_and_previews_with_ranges(video_server):
    server = video_server
    assert await upload(server, small_mp4(), "clip.mp4") == {"name": "clip.mp4", "subfolder": "", "type": "input"}
    info = await server.get_json("/object_info/LoadVideo")
    assert info["LoadVideo"]["input"]["required"]["file"][1]["options"] == ["clip.mp4"]  # today's V3 combo
    status, body = await server.post_prompt(PROMPT)
    assert status == 200, body
    entry = await server.wait_history(body["prompt_id"])
    assert entry["status"]["status_str"] == "success", entry["status"]
    ui = entry["outputs"]["4"]
    assert ui["images"] == [{"filename": "ComfyUI_00001_.mp4", "subfolder": "video", "type": "output"}]
    assert ui["animated"] == [True]
    saved = server.state.env.output_dir / "video" / "ComfyUI_00001_.mp4"
    with av.open(str(saved)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 9 and container.streams.video[0].average_rate == 8
        assert len(container.streams.audio) == 1
    data = saved.read_bytes()
    query = "?filename=ComfyUI_00001_.mp4&subfolder=video&type=output"
    async with server.session.get(f"{server.url}/view{query}") as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "video/mp4"
        assert resp.headers.get("Accept-Ranges") == "bytes" and await resp.read() == data
    async with server.session.get(f"{server.url}/view{query}", headers={"Range": "bytes=100-299"}) as resp:
        assert resp.status == 206 and resp.headers["Content-Type"] == "video/mp4"
        assert resp.headers["Content-Range"] == f"bytes 100-299/{len(data)}"
        assert await resp.read() == data[100:300]
    async with server.session.get(f"{server.url}/view{query}", headers={"Range": "bytes=-50"}) as resp:
        assert resp.status == 206 and await resp.read() == data[-50:]
    async with server.session.get(f"{server.url}/view{query}", headers={"Range": f"bytes={len(data) + 10}-"}) as resp:
        assert resp.status == 416


@pytest.mark.parametrize("name, content_type", [
    ("a.mp4", "video/mp4"), ("a.webm", "video/webm"), ("a.webp", "image/webp"), ("a.png", "image/png"),
    ("a.gif", "image/gif"), ("a.mp3", "audio/mpeg"), ("a.flac", "audio/flac"), ("a.opus", "audio/ogg"),
    ("a.wav", "audio/wav")])
async def test_view_content_types_of_media_files(server, name, content_type):
    (server.state.env.output_dir / name).write_bytes(b"0123456789")
    async with server.session.get(f"{server.url}/view?filename={name}", headers={"Range": "bytes=2-5"}) as resp:
        assert resp.status == 206 and resp.headers["Content-Type"] == content_type
        assert await resp.read() == b"2345"


async def test_a_corrupt_video_is_refused_at_prompt_with_the_file_named(video_server):
    server = video_server
    await upload(server, b"\x00\x00\x00\x18ftypmp42" + b"broken" * 100, "clip.mp4")
    status, body = await server.post_prompt(PROMPT)
    assert status == 400
    (error,) = body["node_errors"]["1"]["errors"]
    assert "clip.mp4" in error["details"] and "Invalid video file" in error["details"]
    status, body = await server.post_prompt({**PROMPT, "1": {"class_type": "LoadVideo", "inputs": {"file": "nope.mp4"}}})
    assert status == 400 and "Invalid video file: nope.mp4" in body["node_errors"]["1"]["errors"][0]["details"]
