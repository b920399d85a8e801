"""`comfy-sdk` 0.5.0 (pinned in requirements-dev.txt), Comfy's own Python client for API v2, runs
its README's quick-start flow against this server with no proxy in front: upload an asset and
put it in a workflow, submit, stream the events, read the outputs (whole and by range), get the
workflow back, cancel, list with labels, and see a reused idempotency key refused.

The SDK's client is synchronous (httpx); it runs in a worker thread while the server runs on the
test's event loop."""
from __future__ import annotations

import asyncio
import io
import time

import pytest

from tests.web.web_harness import chain

comfy_sdk = pytest.importorskip("comfy_sdk")


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (5, 5), (0, 90, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _quick_start(input_dir, output_dir) -> dict:
    from comfy_sdk import Comfy, IdempotencyKeyReuse
    from comfy_sdk.events import OutputReady, Progress, StatusChange

    seen: dict = {}
    with Comfy() as client:  # COMFY_BASE_URL: this server; no api key for a self-hosted surface
        # an input asset, hashed locally, uploaded once, referenced from the workflow
        data = _png()
        asset = client.assets.from_bytes(data, filename="photo.png")
        wf = client.workflows.from_json(chain(3, steps=20, delay=0.05))
        wf.set_input("2", "tag", asset)
        job = client.submit(wf, metadata={"client": "acme"})
        assert asset.id is not None and asset.created_new is True
        assert job.metadata == {"client": "acme"}
        events = []
        for event in job.events():
            events.append(event)
            if isinstance(event, StatusChange) and event.status == "succeeded":
                break
        seen["events"] = [type(e).__name__ for e in events]
        assert any(isinstance(e, Progress) for e in events)
        ready = [e for e in events if isinstance(e, OutputReady)]
        result = job.result()
        [out] = result.get_outputs("3")
        assert out.type == "image" and out.content_type == "image/png"
        whole = out.to_bytes()
        assert whole == (output_dir / out.name).read_bytes()
        assert ready and ready[0].output.id == out.id
        assert ready[0].output.to_bytes() == whole
        head = io.BytesIO()
        assert out.to_stream(head) == len(whole)
        link = out.get_download_url()
        assert link.url.endswith(f"/api/v2/assets/{out.id}/content") and link.expires_at is None
        # the graph that ran: the asset reference became the uploaded file's input name
        ran = client.jobs.get(job.id).get_workflow()
        assert ran.format == "api"
        assert (input_dir / ran.graph["2"]["inputs"]["tag"]).read_bytes() == data
        # the same bytes again: found by hash, minted from it, nothing uploaded
        again = client.assets.from_bytes(data, filename="copy.png")
        again.commit()
        assert again.created_new is False and again.hash == asset.hash and again.id != asset.id
        # cancel: a long job is interrupted, the one queued behind it removed
        slow = client.submit(client.workflows.from_json(chain(1, steps=400, delay=0.05)))
        behind = client.submit(client.workflows.from_json(chain(2, prefix="behind")))
        assert behind.cancel().status == "canceled"
        while client.jobs.get(slow.id).status == "queued":
            time.sleep(0.02)
        assert slow.cancel().status in ("canceling", "canceled")
        assert slow.wait(timeout=30).status == "canceled"
        # list: newest first, labels filter
        listed = [s.id for s in client.list_jobs()]
        assert listed[:3] == [behind.id, slow.id, job.id]
        assert [s.id for s in client.list_jobs(metadata={"client": "acme"})] == [job.id]
        # single-use idempotency keys
        client.submit(wf, idempotency_key="sdk-key")
        with pytest.raises(IdempotencyKeyReuse):
            client.submit(wf, idempotency_key="sdk-key")
    return seen


async def test_comfy_sdk_quick_start(server, monkeypatch):
    monkeypatch.setenv("COMFY_BASE_URL", server.url)
    monkeypatch.delenv("COMFY_API_KEY", raising=False)
    env = server.state.env
    seen = await asyncio.to_thread(_quick_start, env.input_dir, env.output_dir)
    assert seen["events"][-1] == "StatusChange" and "OutputReady" in seen["events"]
