"""Control characters (C0: U+0000..U+001F, and DEL) are refused in every user-supplied file name:
userdata paths, upload file names and subfolders, /view names (issue 34; docs/server.md)."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.web.test_web_files import _png, _upload
from web.confined_path import PathOutsideRoot, check_relative

CONTROLS = ["\r\n", "\n", "\r", "\t", "\x00", "\x01", "\x1b", "\x1f", "\x7f"]


@pytest.mark.parametrize("ch", CONTROLS)
def test_check_relative_refuses_every_control_character(ch):
    with pytest.raises(PathOutsideRoot, match="control character"):
        check_relative(f"workflows/a{ch}b.json")
    assert check_relative("workflows/a b\u00e9\u2028.json") == ["workflows", "a b\u00e9\u2028.json"]


@pytest.mark.parametrize("ch", CONTROLS)
async def test_userdata_names_with_control_characters_are_refused(server, ch):
    user_root = server.state.env.user_dir / "default"
    name = quote(f"workflows/evil{ch}name.json", safe="")
    for method in ("POST", "GET", "DELETE"):
        async with server.session.request(method, f"{server.url}/userdata/{name}", data=b"{}") as resp:
            assert resp.status == 403, (method, repr(ch), await resp.text())
            assert (await resp.json())["error"]["type"] == "invalid_path"
    async with server.session.post(f"{server.url}/userdata/ok.json", data=b"{}") as resp:
        assert resp.status == 200
    async with server.session.post(f"{server.url}/userdata/ok.json/move/{name}") as resp:
        assert resp.status == 403
    assert (user_root / "ok.json").is_file()
    assert not any(c in p.name for p in user_root.rglob("*") for c in ch)
    async with server.session.get(f"{server.url}/userdata?dir={quote('work' + ch + 'flows', safe='')}") as resp:
        assert resp.status == 403


@pytest.mark.parametrize("ch", ["\r\n", "\n", "\t", "\x1f", "\x7f"])
async def test_upload_subfolders_with_control_characters_are_refused(server, ch):
    status, body = await _upload(server, _png(), "pic.png", subfolder=f"sub{ch}dir")
    assert status == 400, body
    assert not any(ch in str(p) for p in server.state.env.input_dir.rglob("*"))


@pytest.mark.parametrize("ch", ["\t", "\x1f", "\x7f", "\x0b"])
async def test_upload_file_names_with_control_characters_are_refused(server, ch):
    status, body = await _upload(server, _png(), f"pi{ch}c.png")
    assert status == 400, body
    assert list(server.state.env.input_dir.rglob("pi*")) == []


@pytest.mark.parametrize("ch", ["\r\n", "\x1f", "\x7f"])
async def test_view_names_with_control_characters_are_refused(server, ch):
    for query in (f"filename={quote('a' + ch + '.png')}", f"filename=a.png&subfolder={quote('s' + ch)}"):
        async with server.session.get(f"{server.url}/view?{query}") as resp:
            assert resp.status == 400, (query, resp.status)
