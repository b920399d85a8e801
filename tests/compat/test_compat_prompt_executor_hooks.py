"""Packs that replace `execution.PromptExecutor.execute` and `execution.get_input_data` (the
metadata-saving packs: ComfyUI-SaveImageWithMetaData and its forks) see every prompt of the
server on its one PromptExecutor, and every node step's input reading, with ComfyUI's
arguments; their save node reads the running prompt's outputs through `caches.outputs`. A
replacement that fails, or skips the prompt, never takes the server down."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.compat.compat_harness import pack_record, run_prompt, start_pack_server

META_PACKS = Path(__file__).resolve().parent / "hook_packs_meta"

PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 4, "batch_size": 1, "color": 0}},
    "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
    "3": {"class_type": "MetaSaveCapture", "inputs": {"images": ["2", 0], "raw_cache": False}},
}


@pytest.fixture
async def meta_server(tmp_path):
    from compat.execution_api import PromptExecutor

    built_in = PromptExecutor.__dict__["execute"]
    srv = await start_pack_server(tmp_path / "meta", custom_node_dirs=(META_PACKS,))
    try:
        yield srv
    finally:
        await srv.close()
        PromptExecutor.execute = built_in  # the pack assigned the class's (one per process)


def _record(server) -> dict:
    return pack_record(server, "metadata_hooks_pack")


_run = run_prompt


async def test_the_pack_sees_each_prompt_on_one_executor_and_its_save_node_reads_the_run(meta_server):
    record = _record(meta_server)
    entry = await _run(meta_server, PROMPT, extra_data={"meta_note": 1})
    assert entry["status"]["status_str"] == "success", entry["status"]
    prompt_id = entry["prompt"][1]

    [seen] = record["prompts"]
    assert seen["prompt_id"] == prompt_id and seen["outputs"] == ["3"]
    assert type(seen["executor"]).__name__ == "PromptExecutor"
    # after the original: ComfyUI's state on the executor, from the server's run
    [after] = record["after"]
    assert after["success"] is True
    assert after["messages"][0] == "execution_start" and after["messages"][-1] == "execution_success"
    assert after["outputs"]["3"]["metadata"][0]["save_node"] == "3"

    # get_input_data: before each executed node's calls, ComfyUI's six arguments, an execution list
    # (the save node's own calls, with its cache shim, are not the executor's)
    reads = [r for r in record["input_reads"] if r["list_type"] != "OutputCacheCompat"]
    assert all(r["nargs"] == 6 and r["get_cache"] for r in reads)
    assert [r["unique_id"] for r in reads] == ["1", "2", "3"]
    assert [r["class"] for r in reads] == ["EmptyImage", "ImageInvert", "MetaSaveCapture"]

    # the save node resolved every node's inputs from the running prompt's outputs
    [found] = record["captures"]
    assert found["save_node"] == "3"
    assert found["nodes"]["1"] == {"width": 8, "height": 4, "batch_size": 1, "color": 0}
    assert found["nodes"]["2"] == {"image": [1, 4, 8, 3]}
    assert found["upstream_shape"] == [1, 4, 8, 3]
    assert found["known_nodes"] == ["1", "2", "3"]
    # what the replacement returned is what the node was called with (its own hidden input)
    assert found["task_context"] == {"task": "meta-3"}
    assert entry["outputs"]["3"]["metadata"] == [found]

    # a second prompt: the same executor object (ComfyUI's worker keeps one); the cached nodes
    # are not read again, and the save node reads the raw `caches.outputs` (get_local) too
    again = dict(PROMPT, **{"3": {"class_type": "MetaSaveCapture", "inputs": {"images": ["2", 0], "raw_cache": True}}})
    second = await _run(meta_server, again)
    assert second["status"]["status_str"] == "success", second["status"]
    assert record["prompts"][1]["executor"] is seen["executor"]
    assert [r["unique_id"] for r in record["input_reads"][len(reads) + 3:] if r["get_cache"] and r["list_type"] not in
            ("OutputCacheCompat", "OutputCacheView")] == ["3"]
    assert record["captures"][1]["nodes"]["2"] == {"image": [1, 4, 8, 3]}
    # between prompts the executor's caches answer nothing (the run they read is over)
    assert seen["executor"].caches.outputs.get_local("2") is None


async def test_a_replacement_that_fails_or_skips_never_loses_the_server(meta_server, caplog):
    record = _record(meta_server)
    caplog.set_level(logging.WARNING, logger="compat.execution_routes")

    # raising before it calls the original: logged, the prompt runs without it
    plain = dict(PROMPT, **{"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "m"}}})
    entry = await _run(meta_server, plain, extra_data={"meta_raise_before": True})
    assert entry["status"]["status_str"] == "success", entry["status"]
    assert entry["outputs"]["3"]["images"][0]["filename"].startswith("m")
    assert record["prompts"] == []
    assert any("failed before running prompt" in r.getMessage() for r in caplog.records)

    # raising after the original ran: logged, the outcome stands
    entry = await _run(meta_server, PROMPT, extra_data={"meta_raise_after": True})
    assert entry["status"]["status_str"] == "success", entry["status"]
    assert len(record["prompts"]) == 1 and len(record["after"]) == 1
    assert any("failed after running prompt" in r.getMessage() for r in caplog.records)

    # returning without calling the original: the prompt is skipped, as ComfyUI does (logged)
    changed = dict(PROMPT, **{"1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 4,
                                                                            "batch_size": 1, "color": 0}}})
    entry = await _run(meta_server, changed, extra_data={"meta_skip": True})
    assert entry["status"]["status_str"] == "success" and entry["outputs"] == {}
    assert len(record["captures"]) == 1
    assert any("returned without running prompt" in r.getMessage() for r in caplog.records)

    # and the server goes on
    entry = await _run(meta_server, changed)
    assert entry["status"]["status_str"] == "success"
    assert record["captures"][-1]["nodes"]["2"] == {"image": [1, 4, 16, 3]}
