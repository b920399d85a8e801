"""The editor's user routes: settings and workflows persist, and no path leaves the user folder."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodes.environment import Environment
from web.userdata import SETTINGS_FILE, SettingsStore, add_userdata_routes, merge_translations


def _state(base: Path, packs=()) -> SimpleNamespace:
    env = Environment.rooted_at(base)
    env.ensure_dirs()
    return SimpleNamespace(env=env, packs=list(packs))


@pytest.fixture
async def server(tmp_path: Path):
    """A client for an app with the user routes over `tmp_path/base`; `.user_root` is the
    folder the files land in."""
    state = _state(tmp_path / "base")
    app = web.Application()
    add_userdata_routes(app, state)
    async with TestClient(TestServer(app)) as client:
        client.user_root = state.env.user_dir / "default"
        client.base = tmp_path
        yield client


async def _restart(tmp_path: Path) -> TestClient:
    app = web.Application()
    add_userdata_routes(app, _state(tmp_path / "base"))
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


# --- users and settings -----------------------------------------------------------------------------

async def test_users_is_single_user_server_storage(server: TestClient) -> None:
    for path in ("/users", "/api/users"):
        response = await server.get(path)
        assert response.status == 200
        body = await response.json()
        assert body["storage"] == "server" and "users" not in body
    response = await server.post("/api/users", json={"username": "bob"})
    assert response.status == 400 and (await response.json())["error"]["type"] == "single_user"


async def test_settings_defaults_keep_the_editor_offline_and_on_our_graph(server: TestClient) -> None:
    settings = await (await server.get("/api/settings")).json()
    assert settings["Comfy.Notification.ShowVersionUpdates"] is False
    assert settings["Comfy.TutorialCompleted"] is True
    assert await (await server.get("/settings/Comfy.Notification.ShowVersionUpdates")).json() is False
    assert await (await server.get("/settings/Unknown.Setting")).json() is None


async def test_settings_persist_across_restarts(server: TestClient, tmp_path: Path) -> None:
    response = await server.post("/api/settings/Comfy.Locale", data=json.dumps("fr"))
    assert response.status == 200
    response = await server.post("/api/settings", json={"Comfy.Notification.ShowVersionUpdates": True, "A.B": [1, 2]})
    assert response.status == 200
    stored = json.loads((server.user_root / SETTINGS_FILE).read_text())
    assert stored == {"Comfy.Locale": "fr", "Comfy.Notification.ShowVersionUpdates": True, "A.B": [1, 2]}
    again = await _restart(tmp_path)
    try:
        settings = await (await again.get("/api/settings")).json()
        assert settings["Comfy.Locale"] == "fr" and settings["A.B"] == [1, 2]
        assert settings["Comfy.Notification.ShowVersionUpdates"] is True  # the user's choice wins
        assert settings["Comfy.TutorialCompleted"] is True
    finally:
        await again.close()


@pytest.mark.parametrize("path, body", [("/api/settings/X", b"{not json"), ("/api/settings", b"[1, 2]"),
                                        ("/api/settings", b"\xff\xfe")])
async def test_bad_settings_bodies_are_400_json_and_change_nothing(server: TestClient, path: str, body: bytes) -> None:
    await server.post("/api/settings/Keep", data=json.dumps(1))
    response = await server.post(path, data=body)
    assert response.status == 400
    assert (await response.json())["error"]["type"] in ("invalid_json", "invalid_settings")
    assert json.loads((server.user_root / SETTINGS_FILE).read_text()) == {"Keep": 1}


def test_a_corrupt_settings_file_is_moved_aside_not_lost(tmp_path: Path) -> None:
    path = tmp_path / SETTINGS_FILE
    path.write_text("{half a file")
    store = SettingsStore(path, {"D": 1})
    assert store.all() == {"D": 1}
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(SETTINGS_FILE + ".corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == "{half a file"
    store.set("X", 2)
    assert json.loads(path.read_text()) == {"X": 2}


# --- user files ---------------------------------------------------------------------------------------

async def test_workflow_save_list_open_rename_delete(server: TestClient) -> None:
    workflow = {"nodes": [], "links": [], "version": 0.4}
    response = await server.post("/api/userdata/workflows%2Fmy%20flow.json?overwrite=false&full_info=true",
                                 data=json.dumps(workflow))
    assert response.status == 200
    info = await response.json()
    assert info["path"] == "workflows/my flow.json" and info["size"] > 0 and info["modified"] > 1e12
    assert json.loads((server.user_root / "workflows" / "my flow.json").read_text()) == workflow

    response = await server.post("/api/userdata/workflows%2Fmy%20flow.json?overwrite=false", data=b"{}")
    assert response.status == 409
    response = await server.post("/api/userdata/workflows%2Fmy%20flow.json", data=json.dumps(workflow))
    assert response.status == 200 and await response.json() == "workflows/my flow.json"

    listing = await (await server.get("/api/userdata?dir=workflows&recurse=true&split=false&full_info=true")).json()
    assert [entry["path"] for entry in listing] == ["my flow.json"]
    assert await (await server.get("/userdata?dir=workflows")).json() == ["my flow.json"]
    assert await (await server.get("/userdata?dir=workflows&split=true")).json() == [["my flow.json", "my flow.json"]]

    response = await server.get("/api/userdata/workflows%2Fmy%20flow.json")
    assert response.status == 200 and json.loads(await response.read()) == workflow
    assert response.headers["Content-Disposition"] == "attachment"
    assert response.headers["X-Content-Type-Options"] == "nosniff"

    response = await server.post("/api/userdata/workflows%2Fmy%20flow.json/move/workflows%2Fsub%2Frenamed.json"
                                 "?overwrite=false&full_info=true")
    assert response.status == 200 and (await response.json())["path"] == "workflows/sub/renamed.json"
    assert (await server.get("/api/userdata/workflows%2Fmy%20flow.json")).status == 404
    listing = await (await server.get("/api/userdata?dir=workflows&recurse=true")).json()
    assert listing == ["sub/renamed.json"]
    assert await (await server.get("/api/userdata?dir=workflows")).json() == []  # not recursive

    response = await server.delete("/api/userdata/workflows%2Fsub%2Frenamed.json")
    assert response.status == 204
    assert (await server.delete("/api/userdata/workflows%2Fsub%2Frenamed.json")).status == 404


async def test_listing_skips_hidden_names_as_comfyui_does(server: TestClient) -> None:
    (server.user_root / "workflows" / ".hidden.json").write_text("{}")
    (server.user_root / "workflows" / ".cache").mkdir()
    (server.user_root / "workflows" / ".cache" / "x.json").write_text("{}")
    (server.user_root / "workflows" / "shown.json").write_text("{}")
    assert await (await server.get("/api/userdata?dir=workflows&recurse=true")).json() == ["shown.json"]


async def test_move_refuses_to_overwrite_when_asked(server: TestClient) -> None:
    await server.post("/api/userdata/a.json", data=b"1")
    await server.post("/api/userdata/b.json", data=b"2")
    response = await server.post("/api/userdata/a.json/move/b.json?overwrite=false")
    assert response.status == 409
    assert (server.user_root / "a.json").read_bytes() == b"1" and (server.user_root / "b.json").read_bytes() == b"2"


async def test_listing_a_missing_folder_is_404_and_dir_is_required(server: TestClient) -> None:
    assert (await server.get("/api/userdata?dir=nothing")).status == 404
    response = await server.get("/api/userdata")
    assert response.status == 400 and (await response.json())["error"]["type"] == "missing_dir"


async def test_the_editors_folders_exist_from_the_start(server: TestClient) -> None:
    for folder in ("workflows", "subgraphs"):
        response = await server.get(f"/api/userdata?dir={folder}&recurse=true&split=false&full_info=true")
        assert response.status == 200 and await response.json() == []


async def test_v2_listing_shows_folders_first(server: TestClient) -> None:
    await server.post("/api/userdata/workflows%2Fb.json", data=b"{}")
    await server.post("/api/userdata/a.txt", data=b"x")
    listing = await (await server.get("/api/v2/userdata")).json()
    assert [(e["name"], e["type"], e["path"]) for e in listing] == [
        ("subgraphs", "directory", "subgraphs"), ("workflows", "directory", "workflows"),
        ("a.txt", "file", "a.txt"), ("b.json", "file", "workflows/b.json")]
    sub = await (await server.get("/v2/userdata?path=workflows")).json()
    assert [e["path"] for e in sub] == ["workflows/b.json"] and sub[0]["size"] == 2
    assert (await server.get("/v2/userdata?path=nothing")).status == 404
    assert (await server.get("/v2/userdata?path=a.txt")).status == 400


async def test_user_css_is_served_as_a_stylesheet(server: TestClient) -> None:
    await server.post("/api/userdata/user.css", data=b"body { color: red }")
    response = await server.get("/api/userdata/user.css")
    assert response.headers["Content-Type"].startswith("text/css")
    assert response.headers["Content-Disposition"] == "inline"
    await server.post("/api/userdata/evil.html", data=b"<script>alert(1)</script>")
    response = await server.get("/api/userdata/evil.html")
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Content-Disposition"] == "attachment"


TRAVERSALS = [
    "..%2F..%2Fsecret.txt",           # encoded separators, decoded once by the router
    "%2e%2e%2Fsecret.txt",            # encoded dots
    "workflows%2F..%2F..%2Fsecret.txt",
    "%2Fetc%2Fpasswd",                # absolute
    "..%5C..%5Csecret.txt",           # backslashes
    "C:%2Fsecret.txt",                # drive prefix
    "a%00b",                          # NUL
    "workflows%2F%2Fx.json",          # empty segment
]


@pytest.mark.parametrize("name", TRAVERSALS)
async def test_paths_cannot_leave_the_user_folder(server: TestClient, name: str) -> None:
    secret = server.base / "base" / "secret.txt"
    secret.write_text("top secret")
    for method in ("GET", "POST", "DELETE"):
        response = await server.request(method, f"/api/userdata/{name}", data=b"overwritten")
        assert response.status == 403, (method, name)
        assert (await response.json())["error"]["type"] == "invalid_path"
    await server.post("/api/userdata/ok.json", data=b"{}")
    response = await server.post(f"/api/userdata/ok.json/move/{name}")
    assert response.status == 403
    assert (server.user_root / "ok.json").is_file()
    assert secret.read_text() == "top secret"
    assert (await server.get(f"/api/userdata?dir={name}")).status == 403
    assert (await server.get(f"/api/v2/userdata?path={name}")).status == 403


async def test_double_encoding_stays_a_literal_name_inside(server: TestClient) -> None:
    response = await server.post("/api/userdata/%252e%252e%252fx.json", data=b"{}")
    assert response.status == 200
    assert (server.user_root / "%2e%2e%2fx.json").is_file()


async def test_symlinks_leading_out_are_refused_and_not_listed(server: TestClient, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    server.user_root.mkdir(parents=True, exist_ok=True)
    (server.user_root / "workflows").mkdir(exist_ok=True)
    (server.user_root / "workflows" / "link").symlink_to(outside, target_is_directory=True)
    (server.user_root / "workflows" / "file.json").symlink_to(outside / "secret.json")
    assert (await server.get("/api/userdata/workflows%2Flink%2Fsecret.json")).status == 403
    assert (await server.get("/api/userdata/workflows%2Ffile.json")).status == 403
    assert (await server.post("/api/userdata/workflows%2Flink%2Fnew.json", data=b"{}")).status == 403
    assert (await server.post("/api/userdata/workflows%2Ffile.json", data=b"[]")).status == 403
    assert (await server.delete("/api/userdata/workflows%2Ffile.json")).status == 403
    assert not (outside / "new.json").exists() and (outside / "secret.json").read_text() == "{}"
    listing = await (await server.get("/api/userdata?dir=workflows&recurse=true")).json()
    assert listing == []
    assert await (await server.get("/api/v2/userdata?path=workflows")).json() == []


# --- i18n ------------------------------------------------------------------------------------------

def _pack_with_locales(root: Path, name: str, files: dict[str, dict]) -> SimpleNamespace:
    for relative, content in files.items():
        path = root / name / "locales" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
    return SimpleNamespace(name=name, path=root / name, ok=True, web_directory=None)


def test_translations_merge_across_packs(tmp_path: Path) -> None:
    a = _pack_with_locales(tmp_path, "a", {"en/main.json": {"x": {"y": 1}},
                                           "en/nodeDefs.json": {"NodeA": {"display_name": "A"}},
                                           "fr/main.json": {"x": {"y": 2}}})
    b = _pack_with_locales(tmp_path, "b", {"en/main.json": {"x": {"z": 3}},
                                           "en/nodeDefs.json": {"NodeB": {"display_name": "B"}}})
    (tmp_path / "b" / "locales" / "en" / "settings.json").write_text("{broken")
    assert merge_translations([a.path, b.path, tmp_path / "missing"]) == {
        "en": {"x": {"y": 1, "z": 3}, "nodeDefs": {"NodeA": {"display_name": "A"}, "NodeB": {"display_name": "B"}}},
        "fr": {"x": {"y": 2}},
    }


async def test_i18n_route_serves_the_packs_translations(tmp_path: Path) -> None:
    pack = _pack_with_locales(tmp_path / "custom_nodes", "p", {"en/main.json": {"hello": "world"}})
    app = web.Application()
    add_userdata_routes(app, _state(tmp_path / "base", packs=[pack]))
    async with TestClient(TestServer(app)) as client:
        assert await (await client.get("/api/i18n")).json() == {"en": {"hello": "world"}}
        assert await (await client.get("/i18n")).json() == {"en": {"hello": "world"}}
