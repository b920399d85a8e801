"""The jobs API as today's ComfyUI serves it (server.py @002c3fb9, comfy_execution/jobs.py
@172be438, Comfy-Org/ComfyUI): query checks and their error shapes, pruned fields, outputs
summary and preview priority, idempotent single and batch cancel."""
from __future__ import annotations

import uuid

import pytest

from tests.web.web_harness import chain
from web.routes_jobs import normalized_outputs, output_summary


async def test_listing_filters_sorts_and_pages(server):
    _, first = await server.post_prompt(chain(1, steps=3, delay=0.05))
    await server.wait_history(first["prompt_id"])
    _, second = await server.post_prompt(chain(2))
    await server.wait_history(second["prompt_id"])
    everything = await server.get_json("/api/jobs")
    assert everything["pagination"] == {"offset": 0, "limit": None, "total": 2, "has_more": False}
    assert [j["id"] for j in everything["jobs"]] == [second["prompt_id"], first["prompt_id"]]
    oldest_first = await server.get_json("/api/jobs?sort_order=ASC&status=COMPLETED")
    assert [j["id"] for j in oldest_first["jobs"]] == [first["prompt_id"], second["prompt_id"]]
    longest = await server.get_json("/api/jobs?sort_by=execution_duration&limit=1&offset=-3")
    assert longest["jobs"][0]["id"] == first["prompt_id"]  # 3 steps of 50 ms
    assert longest["pagination"] == {"offset": 0, "limit": 1, "total": 2, "has_more": True}
    job = longest["jobs"][0]
    assert "execution_error" not in job
    assert job["create_time"] <= job["execution_start_time"] <= job["execution_end_time"]


@pytest.mark.parametrize("query, message", [
    ("status=done", "Invalid status value(s): done. Valid values: pending, in_progress, completed, failed, cancelled"),
    ("sort_by=name", "sort_by must be 'created_at' or 'execution_duration'"),
    ("sort_order=up", "sort_order must be 'asc' or 'desc'"),
    ("limit=0", "limit must be a positive integer"),
    ("limit=ten", "limit must be an integer"),
    ("offset=x", "offset must be an integer"),
])
async def test_bad_queries_are_400_with_comfyuis_messages(server, query, message):
    async with server.session.get(f"{server.url}/api/jobs?{query}") as resp:
        assert resp.status == 400 and await resp.json() == {"error": message}


async def test_pending_job_detail_and_idempotent_cancel(server):
    _, blocker = await server.post_prompt(chain(1, steps=200, delay=0.02))
    _, waiting = await server.post_prompt(chain(2), extra_data={"extra_pnginfo": {"workflow": {"id": "wf-9"}}})
    detail = await server.get_json(f"/api/jobs/{waiting['prompt_id']}")
    assert detail["status"] == "pending" and detail["workflow_id"] == "wf-9"
    assert detail["outputs_count"] == 0 and detail["previewable_outputs_count"] == 0
    assert "execution_end_time" not in detail and "outputs" not in detail
    assert detail["workflow"]["prompt"] == chain(2) and detail["workflow"]["extra_data"]["extra_pnginfo"]

    async with server.session.post(f"{server.url}/api/jobs/cancel",
                                   json={"job_ids": [waiting["prompt_id"], str(uuid.uuid4())]}) as resp:
        assert await resp.json() == {"cancelled": True}
    async with server.session.post(f"{server.url}/api/jobs/{waiting['prompt_id']}/cancel") as resp:
        assert await resp.json() == {"cancelled": False}  # already gone: a no-op
    async with server.session.post(f"{server.url}/api/jobs/{blocker['prompt_id']}/cancel") as resp:
        assert await resp.json() == {"cancelled": True}
    await server.wait_history(blocker["prompt_id"])
    async with server.session.post(f"{server.url}/api/jobs/{blocker['prompt_id']}/cancel") as resp:
        assert await resp.json() == {"cancelled": False}
    assert (await server.get_json(f"/api/jobs/{blocker['prompt_id']}"))["status"] == "cancelled"


@pytest.mark.parametrize("kwargs, expected", [
    ({"data": b"{nope"}, {"error": "Request body must be valid JSON"}),
    ({"json": {"job_ids": "x"}}, {"error": "job_ids must be a list"}),
    ({"json": {"job_ids": ["not-a-uuid", 5, "6F9619FF-8B86-D011-B42D-00C04FC964FF"]}},
     {"error": "job_ids contains invalid id(s)",
      "invalid_ids": ["not-a-uuid", "5", "6F9619FF-8B86-D011-B42D-00C04FC964FF"]}),
])
async def test_batch_cancel_rejects_bad_bodies(server, kwargs, expected):
    async with server.session.post(f"{server.url}/api/jobs/cancel", **kwargs) as resp:
        assert resp.status == 400 and await resp.json() == expected


def test_output_summary_counts_files_and_prefers_saved_media():
    outputs = {
        "1": {"text": ["x" * 2000], "values": [3]},
        "2": {"images": [{"filename": "t.png", "subfolder": "", "type": "temp"}], "animated": [True]},
        "3": {"3d": ["mesh.glb"], "latents": [{"filename": "a.latent", "type": "output"}]},
        "4": {"images": [{"filename": "o.png", "subfolder": "", "type": "output"}]},
    }
    count, previewable, preview = output_summary(outputs)
    assert (count, previewable) == (4, 3)  # t.png, mesh.glb, a.latent, o.png; a.latent is not previewable
    assert preview == {"filename": "mesh.glb", "type": "output", "subfolder": "", "mediaType": "3d", "nodeId": "3"}
    only_temp = output_summary({"2": outputs["2"]})[2]
    assert only_temp["filename"] == "t.png" and only_temp["mediaType"] == "images" and only_temp["nodeId"] == "2"
    text = output_summary({"1": outputs["1"]})
    assert text[:2] == (0, 0) and text[2] == {"content": "x" * 1024, "truncated": True, "nodeId": "1",
                                             "mediaType": "text"}
    assert normalized_outputs({"3": {"3d": ["mesh.glb", None]}}) == {
        "3": {"3d": [{"filename": "mesh.glb", "type": "output", "subfolder": "", "mediaType": "3d"}]}}
