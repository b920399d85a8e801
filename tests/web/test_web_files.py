"""/view and /upload/image|mask: folders, de-duplication, previews, channels, traversal refused."""
from __future__ import annotations

import io
import json
import os

import aiohttp
import pytest
from PIL import Image, PngImagePlugin


def _png(color=(10, 20, 30, 255), size=(8, 6), mode="RGBA", text: dict | None = None) -> bytes:
    buf = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    for k, v in (text or {}).items():
        info.add_text(k, v)
    Image.new(mode, size, color).save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def _multipart(data: bytes, name: str, fields: dict) -> tuple[bytes, str]:
    """A multipart body written by hand: aiohttp's client would percent-encode a hostile file
    name, and a browser sends it raw, as here."""
    boundary = "----webtestboundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
                 f"Content-Type: image/png\r\n\r\n".encode("utf-8") + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


async def _upload(server, data: bytes, name: str = "pic.png", path: str = "/upload/image", **fields) -> tuple:
    body, content_type = _multipart(data, name, fields)
    async with server.session.post(f"{server.url}{path}", data=body,
                                   headers={"Content-Type": content_type}) as resp:
        return resp.status, await resp.json()


async def test_upload_dedup_rename_overwrite_and_subfolder(server):
    a, b = _png((1, 2, 3, 255)), _png((9, 9, 9, 255))
    assert await _upload(server, a) == (200, {"name": "pic.png", "subfolder": "", "type": "input"})
    assert await _upload(server, a) == (200, {"name": "pic.png", "subfolder": "", "type": "input"})  # same bytes
    assert await _upload(server, b) == (200, {"name": "pic (1).png", "subfolder": "", "type": "input"})
    assert await _upload(server, b) == (200, {"name": "pic (1).png", "subfolder": "", "type": "input"})
    assert await _upload(server, b, overwrite="true") == (200, {"name": "pic.png", "subfolder": "", "type": "input"})
    inp = server.state.env.input_dir
    assert (inp / "pic.png").read_bytes() == b
    status, body = await _upload(server, a, subfolder="sub/deeper", type="temp")
    assert (status, body) == (200, {"name": "pic.png", "subfolder": "sub/deeper", "type": "temp"})
    assert (server.state.env.temp_dir / "sub" / "deeper" / "pic.png").read_bytes() == a


@pytest.mark.parametrize("name, fields", [
    ("../evil.png", {}), ("..", {}), ("a/b.png", {}), ("a\\\\b.png", {}),  # quoted-string: the server reads a\\b.png
    ("x\x01.png", {}), ("", {}),
    ("ok.png", {"subfolder": "../.."}), ("ok.png", {"subfolder": "/etc"}), ("ok.png", {"type": "models"}),
])
async def test_upload_names_outside_the_folder_are_refused(server, name, fields):
    status, body = await _upload(server, _png(), name=name, **fields)
    assert status in (400, 403) and "error" in body
    env = server.state.env
    assert not (env.input_dir.parent / "evil.png").exists() and not list(env.input_dir.rglob("*.png"))


async def test_upload_requires_multipart_and_an_image_field(server):
    async with server.session.post(f"{server.url}/upload/image", json={"image": "x"}) as resp:
        assert resp.status == 400 and "multipart" in (await resp.json())["error"]["message"]
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("type", "input")
    async with server.session.post(f"{server.url}/api/upload/image", data=form) as resp:
        assert resp.status == 400 and "'image'" in (await resp.json())["error"]["message"]


async def test_upload_over_the_size_limit_is_413_json(tmp_path):
    from tests.web.web_harness import start_test_server

    srv = await start_test_server(tmp_path, max_upload_size_mb=0.01)
    try:
        status, body = await _upload(srv, os.urandom(50_000))
        assert status == 413 and body["error"]["type"] == "request_too_large"
        assert not any(srv.state.env.input_dir.iterdir())
        async with srv.session.get(f"{srv.url}/prompt") as resp:
            assert resp.status == 200
    finally:
        await srv.close()


async def test_view_serves_each_folder_with_subfolders_and_annotations(server):
    env = server.state.env
    (env.output_dir / "s").mkdir(parents=True)
    (env.output_dir / "s" / "o.png").write_bytes(_png())
    (env.input_dir / "i.png").write_bytes(_png((5, 5, 5, 255)))
    async with server.session.get(f"{server.url}/view", params={"filename": "o.png", "subfolder": "s"}) as resp:
        assert resp.status == 200 and resp.content_type == "image/png"
        assert await resp.read() == (env.output_dir / "s" / "o.png").read_bytes()
    async with server.session.get(f"{server.url}/api/view", params={"filename": "i.png", "type": "input"}) as resp:
        assert resp.status == 200
    async with server.session.get(f"{server.url}/view", params={"filename": "i.png [input]"}) as resp:
        assert resp.status == 200
    async with server.session.get(f"{server.url}/view", params={"filename": "missing.png"}) as resp:
        assert resp.status == 404 and (await resp.json())["error"]["type"] == "not_found"
    async with server.session.get(f"{server.url}/view", params={"filename": "o.png", "type": "models"}) as resp:
        assert resp.status == 400
    async with server.session.get(f"{server.url}/view") as resp:
        assert resp.status == 400


async def test_view_preview_and_channels(server):
    (server.state.env.output_dir / "c.png").write_bytes(_png((200, 100, 50, 77), size=(10, 4)))
    base = {"filename": "c.png"}
    async with server.session.get(f"{server.url}/view", params={**base, "preview": "webp;50"}) as resp:
        assert resp.status == 200 and resp.content_type == "image/webp"
        assert Image.open(io.BytesIO(await resp.read())).format == "WEBP"
    async with server.session.get(f"{server.url}/view", params={**base, "preview": "jpeg;90"}) as resp:
        assert resp.content_type == "image/jpeg"
    async with server.session.get(f"{server.url}/view", params={**base, "channel": "rgb"}) as resp:
        img = Image.open(io.BytesIO(await resp.read()))
        assert img.mode == "RGB" and img.getpixel((0, 0)) == (200, 100, 50)
    async with server.session.get(f"{server.url}/view", params={**base, "channel": "a"}) as resp:
        img = Image.open(io.BytesIO(await resp.read()))
        assert img.mode == "RGBA" and img.getpixel((0, 0)) == (0, 0, 0, 77)
    async with server.session.get(f"{server.url}/view", params={**base, "channel": "x"}) as resp:
        assert resp.status == 400
    async with server.session.get(f"{server.url}/view", params={**base, "preview": "gif;1"}) as resp:
        assert resp.status == 400
    (server.state.env.output_dir / "fake.png").write_text("not an image")
    async with server.session.get(f"{server.url}/view", params={"filename": "fake.png", "channel": "rgb"}) as resp:
        assert resp.status == 400 and "not a readable image" in (await resp.json())["error"]["message"]


async def test_view_never_serves_active_content_inline(server):
    out = server.state.env.output_dir
    (out / "x.html").write_text("<script>alert(1)</script>")
    (out / "x.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")
    for name in ("x.html", "x.svg"):
        async with server.session.get(f"{server.url}/view", params={"filename": name}) as resp:
            assert resp.status == 200 and resp.content_type == "application/octet-stream"
            assert resp.headers["Content-Disposition"].startswith("attachment")
            assert resp.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("params", [
    {"filename": "../secret.txt"}, {"filename": "/etc/passwd"}, {"filename": "..%2Fsecret.txt"},
    {"filename": "secret.txt", "subfolder": ".."}, {"filename": "secret.txt", "subfolder": "../"},
    {"filename": "secret.txt", "subfolder": "/"}, {"filename": "secret.txt", "subfolder": "a/../.."},
    {"filename": "..\\secret.txt"}, {"filename": "secret.txt", "subfolder": "link"},
    {"filename": "leak.txt"},
])
async def test_view_cannot_reach_outside_its_folder(server, params):
    env = server.state.env
    secret = env.output_dir.parent / "secret.txt"
    secret.write_text("top secret")
    env.output_dir.mkdir(parents=True, exist_ok=True)
    if not (env.output_dir / "link").exists():
        os.symlink(env.output_dir.parent, env.output_dir / "link")  # a folder link pointing outside
        os.symlink(secret, env.output_dir / "leak.txt")  # a file link pointing outside
    async with server.session.get(f"{server.url}/view", params=params) as resp:
        assert resp.status in (400, 403, 404)
        assert b"top secret" not in await resp.read()


async def test_mask_upload_puts_alpha_onto_the_original(server):
    original = _png((10, 20, 30, 255), size=(6, 4), text={"workflow": "{}"})
    status, ref = await _upload(server, original, name="orig.png")
    assert status == 200
    mask = _png((0, 0, 0, 40), size=(6, 4))
    status, body = await _upload(server, mask, name="orig_mask.png", path="/upload/mask",
                                 original_ref=json.dumps({"filename": "orig.png", "type": "input",
                                                          "subfolder": ""}))
    assert status == 200 and body["name"] == "orig_mask.png"
    img = Image.open(server.state.env.input_dir / "orig_mask.png")
    assert img.getpixel((0, 0)) == (10, 20, 30, 40) and img.info.get("workflow") == "{}"
    status, body = await _upload(server, mask, name="m.png", path="/upload/mask",
                                 original_ref=json.dumps({"filename": "../orig.png", "type": "input"}))
    assert status in (400, 403)
    status, body = await _upload(server, mask, name="m.png", path="/upload/mask", original_ref="{bad")
    assert status == 400
