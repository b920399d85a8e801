"""Serving the official editor unmodified, our extension, and packs' web folders."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodes.environment import Environment
from web import frontend
from web.frontend import (CONTENT_SECURITY_POLICY, FrontendError, WebExtensions, add_frontend_routes,
                          add_pack_web_directories, editor_default_settings, frontend_root)

OUR_SCRIPT = "/extensions/comfy-engine/default_graph.js"
OUR_SCRIPTS = [OUR_SCRIPT, "/extensions/comfy-engine/model_hint.js"]  # web/extensions/*.js, sorted


def _pack(root: Path, name: str, files: dict[str, str], web_dir: str = "web") -> SimpleNamespace:
    for relative, text in files.items():
        path = root / name / web_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return SimpleNamespace(name=name, path=root / name, ok=True, web_directory=str(root / name / web_dir))


@pytest.fixture
async def client(tmp_path: Path):
    env = Environment.rooted_at(tmp_path / "base")
    packs = [_pack(tmp_path / "custom_nodes", "my pack", {"js/ui.js": "export const x = 1;", "js/style.css": "a{}",
                                                          "js/sub/more.js": "export {};"}),
             SimpleNamespace(name="failed", path=tmp_path, ok=False, web_directory=str(tmp_path)),
             SimpleNamespace(name="no_web", path=tmp_path, ok=True, web_directory=None)]
    app = web.Application()
    add_frontend_routes(app, SimpleNamespace(env=env, packs=packs))

    async def object_info(request: web.Request) -> web.Response:  # an API route added afterwards
        return web.json_response({})
    app.router.add_get("/api/object_info", object_info)
    async with TestClient(TestServer(app)) as test_client:
        test_client.tmp = tmp_path
        yield test_client


async def test_index_is_the_unmodified_editor_with_a_csp(client: TestClient) -> None:
    root = frontend_root()
    for path in ("/", "/index.html"):
        response = await client.get(path)
        assert response.status == 200
        assert await response.read() == (root / "index.html").read_bytes()
        assert response.headers["Content-Type"].startswith("text/html")
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["Content-Security-Policy"] == "connect-src 'self' blob: data:"


async def test_every_response_carries_the_csp(client: TestClient) -> None:
    for path in ("/api/extensions", "/api/object_info", "/scripts/app.js", "/no/such/route"):
        response = await client.get(path)
        assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, path


async def test_static_files_are_byte_identical_with_module_script_types(client: TestClient) -> None:
    root = frontend_root()
    entry = sorted((root / "assets").glob("index-*.js"))[0]
    for url, path in ((f"/assets/{entry.name}", entry), ("/scripts/app.js", root / "scripts" / "app.js"),
                      ("/extensions/core/editAttention.js", root / "extensions" / "core" / "editAttention.js")):
        response = await client.get(url)
        assert response.status == 200, url
        assert response.headers["Content-Type"] == "application/javascript; charset=utf-8"
        assert hashlib.sha256(await response.read()).digest() == hashlib.sha256(path.read_bytes()).digest()
    css = await client.get("/materialdesignicons.min.css")
    assert css.status == 200 and css.headers["Content-Type"].startswith("text/css")


async def test_static_paths_cannot_leave_the_editor_folder(client: TestClient) -> None:
    for url in ("/assets/..%2F..%2F__init__.py", "/scripts/%2e%2e%2F%2e%2e%2F__init__.py", "/assets/%2Fetc%2Fpasswd"):
        response = await client.get(url)
        assert response.status == 403, url
        assert (await response.json())["error"]["type"] == "invalid_path"
    assert (await client.get("/assets/nothing-here.js")).status == 404


async def test_extensions_lists_ours_then_the_packs_scripts(client: TestClient) -> None:
    for path in ("/extensions", "/api/extensions"):
        urls = await (await client.get(path)).json()
        assert urls == [*OUR_SCRIPTS, "/extensions/my%20pack/js/sub/more.js", "/extensions/my%20pack/js/ui.js"]
    # the editor skips URLs containing extensions/core, so its own shims are never listed


async def test_our_extension_and_its_workflow_are_served(client: TestClient) -> None:
    script = await client.get(OUR_SCRIPT)
    assert script.status == 200
    assert script.headers["Content-Type"] == "application/javascript; charset=utf-8"
    text = await script.text()
    assert 'from "../../scripts/app.js"' in text and "registerExtension" in text
    workflow = await client.get("/extensions/comfy-engine/default_workflow.json")
    assert workflow.status == 200
    assert (await workflow.json())["version"] == 0.4


async def test_pack_web_files_are_served_and_confined(client: TestClient) -> None:
    response = await client.get("/extensions/my%20pack/js/ui.js")
    assert response.status == 200 and await response.text() == "export const x = 1;"
    assert response.headers["Content-Type"] == "application/javascript; charset=utf-8"
    assert (await client.get("/extensions/my%20pack/js/style.css")).status == 200
    (client.tmp / "custom_nodes" / "my pack" / "secret.py").write_text("token")
    for url in ("/extensions/my%20pack/..%2Fsecret.py", "/extensions/my%20pack/js%2F..%2F..%2Fsecret.py"):
        assert (await client.get(url)).status == 403, url
    assert (await client.get("/extensions/failed/anything.js")).status == 404
    assert (await client.get("/extensions/nobody/x.js")).status == 404


async def test_routes_added_after_the_frontend_still_answer(client: TestClient) -> None:
    response = await client.get("/api/object_info")
    assert response.status == 200 and await response.json() == {}


def test_pack_web_directories_can_be_added_later_and_again(tmp_path: Path) -> None:
    app = web.Application()
    extensions = add_frontend_routes(app)
    pack = _pack(tmp_path, "later", {"a.js": ""})
    add_pack_web_directories(app, [pack])
    add_pack_web_directories(app, [pack])  # same folder again: harmless
    assert extensions.script_urls() == [*OUR_SCRIPTS, "/extensions/later/a.js"]
    other = _pack(tmp_path / "elsewhere", "later", {"b.js": ""})
    ours = _pack(tmp_path / "clash", "comfy-engine", {"c.js": ""})
    gone = SimpleNamespace(name="gone", path=tmp_path, ok=True, web_directory=str(tmp_path / "missing"))
    errors = add_pack_web_directories(app, [other, ours, gone])  # logged and left out, no crash
    assert len(errors) == 3 and "already served" in errors[0] and "is not a folder" in errors[2]
    assert extensions.script_urls() == [*OUR_SCRIPTS, "/extensions/later/a.js"]


@pytest.mark.parametrize("name", ["core", "", "a/b", ".."])
def test_reserved_or_unusable_extension_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        WebExtensions().add(name, tmp_path)


def test_a_missing_web_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a folder"):
        WebExtensions().add("pack", tmp_path / "missing")


def test_the_editor_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    assert frontend_root().joinpath("index.html").is_file()
    with pytest.raises(FrontendError, match="pinned to 9.9.9"):
        frontend_root(expected_version="9.9.9")
    monkeypatch.setattr(frontend, "FRONTEND_DISTRIBUTION", "no-such-frontend-package")
    with pytest.raises(FrontendError, match="not installed"):
        frontend_root()


def test_default_settings_silence_version_checks() -> None:
    settings = editor_default_settings()
    assert settings["Comfy.Notification.ShowVersionUpdates"] is False
    assert settings["Comfy.TutorialCompleted"] is True
    settings["x"] = 1
    assert "x" not in editor_default_settings()  # a fresh dict each time


def test_the_pinned_version_is_what_requirements_install() -> None:
    requirements = (Path(__file__).resolve().parents[2] / "requirements.txt").read_text()
    assert f"comfyui-frontend-package=={frontend.PINNED_FRONTEND_VERSION}" in requirements.split()
    assert json.loads(Path(frontend.OWN_EXTENSION_DIR, "default_workflow.json").read_text())["nodes"]


async def test_an_existing_extensions_route_is_kept(tmp_path: Path) -> None:
    app = web.Application()

    async def theirs(request: web.Request) -> web.Response:
        return web.json_response(["/extensions/theirs.js"])
    app.router.add_get("/api/extensions", theirs)
    add_frontend_routes(app)
    async with TestClient(TestServer(app)) as client:
        assert await (await client.get("/api/extensions")).json() == ["/extensions/theirs.js"]
        assert await (await client.get("/extensions")).json() == OUR_SCRIPTS
