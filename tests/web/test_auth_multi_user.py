"""--multi-user keeps ComfyUI's meaning (the Comfy-User header picks the user/ folder) and says at
start that it is not authentication; with --users the header is ignored (web/userdata.py)."""
from __future__ import annotations

import logging

from tests.web.auth_harness import bearer, start_auth_server
from tests.web.web_harness import start_test_server


async def test_multi_user_header_picks_the_folder_and_is_announced_as_not_authentication(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="web.app"):
        server = await start_test_server(tmp_path, multi_user=True)
    assert any("not authentication" in r.getMessage() for r in caplog.records)
    url, session, user_dir = server.url, server.session, server.state.env.user_dir
    try:
        async with session.get(f"{url}/users") as resp:
            assert await resp.json() == {"storage": "server", "users": {}}
        async with session.post(f"{url}/users", json={"username": "Ann Lee"}) as resp:
            user_id = await resp.json()
        assert user_id.startswith("Ann-Lee_")
        async with session.post(f"{url}/users", json={"username": "Ann Lee"}) as resp:
            assert resp.status == 400
        async with session.get(f"{url}/users") as resp:
            assert (await resp.json())["users"] == {user_id: "Ann Lee"}
        async with session.post(f"{url}/userdata/a.json", data=b"1", headers={"Comfy-User": user_id}) as resp:
            assert resp.status == 200
        assert (user_dir / user_id / "a.json").read_bytes() == b"1"
        async with session.get(f"{url}/userdata/a.json") as resp:  # no header: the default user
            assert resp.status == 404
        async with session.get(f"{url}/userdata/a.json", headers={"Comfy-User": "nobody"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["type"] == "unknown_user"
    finally:
        await server.close()


async def test_with_users_the_header_is_ignored(tmp_path):
    server = await start_auth_server(tmp_path)
    try:
        async with bearer(server, "alice") as alice:
            async with alice.post(f"{server.url}/userdata/b.json", data=b"2", headers={"Comfy-User": "bob"}) as resp:
                assert resp.status == 200
        assert (server.state.env.user_dir / "alice" / "b.json").exists()
        assert not (server.state.env.user_dir / "bob" / "b.json").exists()
    finally:
        await server.close()
