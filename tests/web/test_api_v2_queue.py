"""Queue control over /api/v2 (web/routes_v2.py; docs/queue.md, docs/api-v2.md): the queue's
state, pause / resume, moving a queued job and retrying a failed or canceled one, in v2's shapes
and error envelope; with `--users`, the same rules as the v1 queue routes."""
from __future__ import annotations

from tests.web.auth_harness import bearer, start_auth_server
from tests.web.test_api_v2 import _get, _post_job, _wait_status
from tests.web.web_harness import chain

UNKNOWN = "0b9e1c3a-5d7f-4e2a-9c1b-00000000dead"


def _failing(value: int = 1) -> dict:
    return {"1": {"class_type": "WebTestConst", "inputs": {"value": value}},
            "2": {"class_type": "WebTestFail", "inputs": {"value": ["1", 0], "message": "boom"}},
            "3": {"class_type": "WebTestOutput", "inputs": {"value": ["2", 0], "filename_prefix": "fail"}}}


async def _post(client, url: str, body=None) -> tuple[int, dict]:
    async with client.post(url, json=body) as resp:
        return resp.status, await resp.json()


async def test_pause_move_and_resume(server):
    url = server.url
    status, state = await _post(server.session, f"{url}/api/v2/queue/pause")
    assert status == 200 and state["paused"] is True and server.state.queue.paused
    ids = [(await _post_job(server, {"workflow": chain(n, prefix=f"m{n}")}))[1]["id"] for n in (1, 2, 3)]
    status, state = await _get(server, "/api/v2/queue")
    assert status == 200 and state["pending"] == ids and state["running"] == [] and state["paused"] is True

    status, job = await _post(server.session, f"{url}/api/v2/jobs/{ids[2]}/move", {"position": "front"})
    assert status == 200 and job["id"] == ids[2] and job["status"] == "queued" and job["queue_position"] == 1
    status, job = await _post(server.session, f"{url}/api/v2/jobs/{ids[2]}/move", {"position": 1})
    assert status == 200 and job["queue_position"] == 2
    status, job = await _post(server.session, f"{url}/api/v2/jobs/{ids[0]}/move", {"position": "back"})
    assert job["queue_position"] == 3
    order = [ids[2], ids[1], ids[0]]  # [c, a, b] -> [a, c, b] -> [c, b, a]
    assert (await _get(server, "/api/v2/queue"))[1]["pending"] == order
    assert [i.prompt_id for i in server.state.store.pending_items()] == order  # durable

    for body, code in (({"position": 3}, "invalid_request"), ({"position": -1}, "invalid_request"),
                       ({"position": True}, "invalid_request"), ({"position": "middle"}, "invalid_request"),
                       ({}, "invalid_request")):
        status, answer = await _post(server.session, f"{url}/api/v2/jobs/{ids[0]}/move", body)
        assert (status, answer["error"]["code"]) == (400, code), body
        assert set(answer["error"]) == {"code", "message", "details"}
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{UNKNOWN}/move", {"position": 0})
    assert (status, answer["error"]["code"]) == (404, "not_found")

    status, state = await _post(server.session, f"{url}/api/v2/queue/resume")
    assert status == 200 and state["paused"] is False
    for job_id in order:
        await _wait_status(server, job_id, {"succeeded"})
    assert list(await server.get_json("/history")) == order  # ran in the moved order
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{ids[0]}/move", {"position": 0})
    assert (status, answer["error"]["code"]) == (409, "invalid_state")  # finished: no longer movable


async def test_retry_a_failed_job(server):
    url = server.url
    status, job = await _post_job(server, {"workflow": _failing(), "metadata": {"run": "r1"}})
    assert status == 201
    first = await _wait_status(server, job["id"], {"failed"})
    status, new = await _post(server.session, f"{url}/api/v2/jobs/{job['id']}/retry", {"front": True})
    assert status == 201, new
    assert new["retry_of"] == job["id"] and new["id"] != job["id"] and new["metadata"] == {"run": "r1"}
    assert new["status"] in ("queued", "running", "failed")
    rerun = await _wait_status(server, new["id"], {"failed"})  # it ran again (and failed the same way)
    assert rerun["error"]["message"] == first["error"]["message"] and "boom" in first["error"]["message"]
    assert (await server.get_json(f"/history/{new['id']}"))[new["id"]]["retry_of"] == job["id"]
    listed = (await _get(server, "/api/v2/jobs?metadata[run]=r1"))[1]["jobs"]
    assert {j["id"] for j in listed} == {job["id"], new["id"]}  # the labels follow the retry

    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{job['id']}/retry")
    assert (status, answer["error"]["code"]) == (409, "invalid_state")  # retried once already
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{job['id']}/retry", {"front": "yes"})
    assert (status, answer["error"]["code"]) == (400, "invalid_request")
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{UNKNOWN}/retry")
    assert (status, answer["error"]["code"]) == (404, "not_found")
    status, ok = await _post_job(server, {"workflow": chain(7)})
    await _wait_status(server, ok["id"], {"succeeded"})
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{ok['id']}/retry")
    assert (status, answer["error"]["code"]) == (409, "invalid_state")


async def test_retry_of_a_job_canceled_while_queued_is_a_state_error(server):
    url = server.url
    await _post(server.session, f"{url}/api/v2/queue/pause")
    _, job = await _post_job(server, {"workflow": chain(3)})
    status, canceled = await _post(server.session, f"{url}/api/v2/jobs/{job['id']}/cancel")
    assert canceled["status"] == "canceled"
    status, answer = await _post(server.session, f"{url}/api/v2/jobs/{job['id']}/retry")
    assert (status, answer["error"]["code"]) == (409, "invalid_state")
    await _post(server.session, f"{url}/api/v2/queue/resume")


async def test_users_rules_match_the_v1_queue_routes(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, \
                bearer(server, "admin") as admin, bearer(server, "vera") as vera:
            for client in (alice, vera):  # the queue as a whole is the admins'
                for action in ("pause", "resume"):
                    status, _ = await _post(client, f"{url}/api/v2/queue/{action}")
                    assert status == 403, action
            assert not server.state.queue.paused
            assert (await _post(admin, f"{url}/api/v2/queue/pause"))[0] == 200
            _, mine = await _post(alice, f"{url}/api/v2/jobs", {"workflow": chain(1)})
            _, other = await _post(bob, f"{url}/api/v2/jobs", {"workflow": chain(2)})
            async with alice.get(f"{url}/api/v2/queue") as resp:
                assert (await resp.json())["pending"] == [mine["id"]]  # only alice's own ids
            async with admin.get(f"{url}/api/v2/queue") as resp:
                assert (await resp.json())["pending"] == [mine["id"], other["id"]]
            status, answer = await _post(alice, f"{url}/api/v2/jobs/{other['id']}/move", {"position": 0})
            assert (status, answer["error"]["code"]) == (404, "not_found")  # another user's job reads as unknown
            status, answer = await _post(alice, f"{url}/api/v2/jobs/{other['id']}/retry")
            assert status == 404
            assert (await _post(vera, f"{url}/api/v2/jobs/{mine['id']}/move", {"position": 1}))[0] == 403
            status, moved = await _post(bob, f"{url}/api/v2/jobs/{other['id']}/move", {"position": 0})
            assert status == 200 and moved["queue_position"] == 1
            status, moved = await _post(admin, f"{url}/api/v2/jobs/{mine['id']}/move", {"position": 0})
            assert status == 200 and moved["queue_position"] == 1
            assert [i.prompt_id for i in server.state.queue.pending()] == [mine["id"], other["id"]]
            assert (await _post(admin, f"{url}/api/v2/queue/resume"))[0] == 200
    finally:
        await server.close()
