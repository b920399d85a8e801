"""A prompt's outputs as assets (issue 29; web/asset_outputs.py, web/prompt_run.py,
AssetCatalog.register_output): with --enable-assets the saved file becomes an asset owned by the
prompt, the `executed` message, /history and /api/jobs carry its id; a cached rerun registers
again under the new prompt; new bytes at the same path retire the older record; with assets off
nothing changes."""
from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest
from blake3 import blake3
from PIL import Image

from tests.web.web_harness import chain, collect_until_done, start_test_server, ws_connect
from web.asset_files import AssetRoots
from web.asset_outputs import OutputAssets, is_own_image_preview
from web.assets import AssetCatalog


async def _idle(srv) -> None:
    for _ in range(500):
        async with srv.session.get(f"{srv.url}/api/assets/seed/status") as resp:
            if resp.status != 200 or (await resp.json())["state"] == "IDLE":
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the asset scan did not finish")


@pytest.fixture
async def assets_server(tmp_path):
    srv = await start_test_server(tmp_path, enable_assets=True)
    try:
        await _idle(srv)
        yield srv
    finally:
        await srv.close()


async def _run(srv, prompt: dict, client_id: str) -> tuple[str, dict, dict]:
    """Run `prompt` as `client_id`: (prompt id, node 3's `executed` data, history entry)."""
    ws, _ = await ws_connect(srv, client_id)
    try:
        status, body = await srv.post_prompt(prompt, client_id=client_id)
        assert status == 200, body
        frames = await collect_until_done(ws, body["prompt_id"])
    finally:
        await ws.close()
    executed = [f["data"] for f in frames if isinstance(f, dict) and f["type"] == "executed"
                and f["data"]["node"] == "3"]
    assert len(executed) == 1, frames
    kinds = [f["type"] for f in frames if isinstance(f, dict)]
    assert kinds.index("executed") < kinds.index("execution_success")  # the message kept its place
    return body["prompt_id"], executed[0], await srv.wait_history(body["prompt_id"])


async def _asset(srv, asset_id: str) -> dict:
    return await srv.get_json(f"/api/assets/{asset_id}")


async def test_saved_output_becomes_an_asset_with_its_job_id(assets_server):
    srv = assets_server
    prompt_id, executed, entry = await _run(srv, chain(7, steps=1, prefix="kept"), "owner")

    item = executed["output"]["images"][0]
    assert item["filename"] == "kept_00008.png" and item["type"] == "output"
    uuid.UUID(item["id"])  # a record id
    assert item["preview_id"] == item["id"]  # a PNG previews itself
    assert executed["output"]["values"] == [8]  # the rest of the output untouched
    asset = await _asset(srv, item["id"])
    assert asset["job_id"] == prompt_id and asset["prompt_id"] == prompt_id
    assert asset["name"] == "kept_00008.png" and asset["tags"] == ["output"]
    assert asset["loader_path"] == "kept_00008.png" and asset["mime_type"] == "image/png"
    assert asset["size"] == (srv.state.env.output_dir / "kept_00008.png").stat().st_size

    # the history entry and the jobs API carry the same id, where the executed message has it
    assert entry["outputs"]["3"]["images"][0]["id"] == item["id"]
    job = await srv.get_json(f"/api/jobs/{prompt_id}")
    assert job["outputs"]["3"]["images"][0]["id"] == item["id"]
    listed = await srv.get_json("/api/assets", params={"tags_all": "output"})
    assert item["id"] in [a["id"] for a in listed["assets"]]


async def test_cached_rerun_registers_again_under_the_new_prompt(assets_server):
    srv = assets_server
    first_id, first, _ = await _run(srv, chain(3, steps=1, prefix="again"), "owner")
    second_id, second, entry = await _run(srv, chain(3, steps=1, prefix="again"), "owner")

    old, new = first["output"]["images"][0]["id"], second["output"]["images"][0]["id"]
    assert new != old and entry["outputs"]["3"]["images"][0]["id"] == new
    assert (await _asset(srv, new))["job_id"] == second_id
    # nothing was rewritten: the first record still describes a live file
    earlier = await _asset(srv, old)
    assert earlier["job_id"] == first_id and "missing" not in earlier["tags"]


async def test_outputs_register_without_a_client(assets_server):
    srv = assets_server
    status, body = await srv.post_prompt(chain(9, steps=1, prefix="headless"))
    assert status == 200, body
    entry = await srv.wait_history(body["prompt_id"])
    asset_id = entry["outputs"]["3"]["images"][0]["id"]
    assert (await _asset(srv, asset_id))["job_id"] == body["prompt_id"]


async def test_with_assets_off_messages_and_history_are_unchanged(server):
    _, executed, entry = await _run(server, chain(5, steps=1, prefix="plain"), "owner")
    expected = {"images": [{"filename": "plain_00006.png", "subfolder": "", "type": "output"}], "values": [6]}
    assert executed["output"] == expected
    assert entry["outputs"]["3"] == expected
    assert server.state.worker.assets is None


# -- the registrar and the catalogue, without a server -----------------------------------------
@pytest.fixture
def catalog(tmp_path):
    folders = [tmp_path / name for name in ("input", "output", "temp", "models")]
    for folder in folders:
        folder.mkdir()
    roots = AssetRoots(*(folder.resolve() for folder in folders))
    cat = AssetCatalog(tmp_path / "db.sqlite3", roots).open()
    try:
        yield cat
    finally:
        cat.close()


def _png(path, color=(1, 2, 3)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (2, 2), color).save(path)


def test_enrich_registers_each_file_item_and_leaves_the_input_alone(catalog):
    roots = catalog.roots
    _png(roots.output_dir / "sub" / "a.png")
    _png(roots.temp_dir / "preview.png")
    (roots.output_dir / "clip.mp4").write_bytes(b"not really a video")
    output = {"images": [{"filename": "a.png", "subfolder": "sub", "type": "output"},
                         {"filename": "preview.png", "subfolder": "", "type": "temp"}],
              "video": [{"filename": "clip.mp4", "subfolder": "", "type": "output"}],
              "text": "hello", "values": [1, 2]}
    before = json.loads(json.dumps(output))

    enriched = OutputAssets(catalog).enrich(output, "job-1")

    assert output == before  # the cached UI record never gains ids
    saved, temp = enriched["images"]
    video = enriched["video"][0]
    assert enriched["text"] == "hello" and enriched["values"] == [1, 2]
    assert catalog.get(saved["id"]).tags == ["output"] and catalog.get(saved["id"]).loader_path == "sub/a.png"
    assert catalog.get(temp["id"]).tags == ["temp"]
    assert catalog.get(video["id"]).job_id == "job-1"
    assert saved["preview_id"] == saved["id"] and temp["preview_id"] == temp["id"]
    assert "preview_id" not in video  # only images a browser shows preview themselves


def test_enrich_skips_items_it_cannot_place(catalog):
    roots = catalog.roots
    _png(roots.output_dir / "there.png")
    (roots.output_dir.parent / "secret.png").write_bytes(b"outside")
    output = {"images": [{"filename": "secret.png", "subfolder": "..", "type": "output"},
                         {"filename": "gone.png", "subfolder": "", "type": "output"},
                         {"filename": "there.png", "subfolder": "", "type": "elsewhere"},
                         {"filename": "there.png", "subfolder": "", "type": "output"},
                         "not a dict"]}
    enriched = OutputAssets(catalog).enrich(output, "job")
    escaped, gone, unknown, placed, text = enriched["images"]
    assert "id" not in escaped and "id" not in gone and "id" not in unknown and text == "not a dict"
    assert "id" in placed
    assert catalog.db.execute("SELECT name FROM asset_records").fetchall() == [("there.png",)]


def test_a_failed_registration_leaves_the_item_without_id(catalog, monkeypatch):
    _png(catalog.roots.output_dir / "x.png")

    def broken(path, job_id):
        raise OSError("disk went away")

    monkeypatch.setattr(catalog, "register_output", broken)
    enriched = OutputAssets(catalog).enrich({"images": [{"filename": "x.png", "type": "output"}]}, "job")
    assert enriched == {"images": [{"filename": "x.png", "type": "output"}]}


def test_new_bytes_at_a_path_retire_the_older_record(catalog):
    path = catalog.roots.output_dir / "same.png"
    _png(path, (1, 1, 1))
    first = catalog.register_output(path, "job-1")
    again = catalog.register_output(path, "job-2")  # unchanged file: same content row
    assert catalog.get(again).content_id == catalog.get(first).content_id
    _png(path, (200, 100, 50))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a rewrite within the clock's tick
    third = catalog.register_output(path, "job-3")
    assert "missing" in catalog.get(first).tags and "missing" in catalog.get(again).tags
    assert catalog.get(third).tags == ["output"] and catalog.get(third).size == path.stat().st_size


def test_hashing_on_hashes_the_output(catalog):
    catalog.hashing = True
    path = catalog.roots.output_dir / "h.png"
    _png(path)
    record = catalog.get(catalog.register_output(path, "job"))
    assert record.hash == "blake3:" + blake3(path.read_bytes()).hexdigest()
    assert catalog.hash_exists(record.hash)


@pytest.mark.parametrize("name,own", [("a.png", True), ("a.webp", True), ("a.jpg", True), ("a.exr", False),
                                      ("a.hdr", False), ("a.mp4", False), ("a.flac", False)])
def test_which_outputs_preview_themselves(tmp_path, name, own):
    assert is_own_image_preview(tmp_path / name) is own
