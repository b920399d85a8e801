"""Packs that replace ComfyUI's `execution._async_map_node_over_list` and `execution.execute`
(ComfyUI-Lora-Manager's metadata collector) see every node call and every node step of their
server's prompts, with ComfyUI's arguments; the built-ins map calls as ComfyUI does; another
session without the pack runs unrouted."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tests.compat.compat_harness import EXAMPLE_PACKS, pack_record, run_prompt, start_pack_server

HOOK_PACKS = Path(__file__).resolve().parent / "hook_packs"

PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 4, "batch_size": 1, "color": 0}},
    "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
    "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "hooks"}},
    "4": {"class_type": "HookNumbers", "inputs": {"start": 1, "count": 3}},
    "5": {"class_type": "HookAddOne", "inputs": {"value": ["4", 0]}},
    "6": {"class_type": "HookSum", "inputs": {"values": ["5", 0]}},
    "7": {"class_type": "HookLazyPick", "inputs": {"use_b": False, "a": ["6", 0], "b": ["8", 0]}},
    "8": {"class_type": "HookNumbers", "inputs": {"start": 100, "count": 1}},
    "9": {"class_type": "HookSum", "inputs": {"values": ["7", 0]}},
}
EXECUTED = {"1", "2", "3", "4", "5", "6", "7", "9"}  # 8 is the lazy input nobody asks for


def _record(server) -> dict:
    return pack_record(server, "exec_hooks_pack")


_run = run_prompt


@pytest.fixture
async def hooked(tmp_path):
    srv = await start_pack_server(tmp_path / "hooked", custom_node_dirs=(HOOK_PACKS, EXAMPLE_PACKS))
    try:
        yield srv
    finally:
        await srv.close()


async def test_the_wrappers_see_every_node_call_and_step_with_comfyuis_arguments(hooked, tmp_path):
    record = _record(hooked)
    assert record["detected_async"] is True  # Lora-Manager's test: today's async executor
    entry = await _run(hooked, PROMPT, extra_data={"extra_pnginfo": {"workflow": {"nodes": []}}, "mark": 7})
    assert entry["status"]["status_str"] == "success", entry["status"]
    prompt_id = entry["prompt"][1]

    # _async_map_node_over_list: each executed node's main call once, with ComfyUI's object
    main = [c for c in record["calls"] if c["func"] == c["FUNCTION"]]
    assert sorted(c["unique_id"] for c in main) == sorted(EXECUTED)
    calls = {c["unique_id"]: c for c in main}
    assert all(c["prompt_id"] == prompt_id and c["allow_interrupt"] is True and c["callbacks"] == (True, True)
               for c in main)
    assert (calls["1"]["class"], calls["1"]["FUNCTION"], calls["1"]["RETURN_TYPES"]) == ("EmptyImage", "generate",
                                                                                         ("IMAGE",))
    assert calls["1"]["inputs"] == {"width": [8], "height": [4], "batch_size": [1], "color": [0]}
    assert (calls["2"]["class"], calls["2"]["FUNCTION"]) == ("ImageInvert", "invert")
    [image] = calls["2"]["inputs"]["image"]
    assert tuple(image.shape) == (1, 4, 8, 3)
    [(inverted,)] = calls["2"]["results"]
    assert float(inverted.min()) == 1.0
    # SaveImage: its hidden inputs as ComfyUI passes them (the prompt, extra_pnginfo)
    assert (calls["3"]["class"], calls["3"]["FUNCTION"]) == ("SaveImage", "save_images")
    assert set(calls["3"]["inputs"]) == {"images", "filename_prefix", "prompt", "extra_pnginfo"}
    assert calls["3"]["inputs"]["prompt"] == [PROMPT]
    assert calls["3"]["inputs"]["extra_pnginfo"] == [{"workflow": {"nodes": []}}]
    [saved] = calls["3"]["results"]
    assert saved["ui"]["images"][0]["filename"].startswith("hooks")
    # V1 pack nodes: the node's own instance; one call per list element, the last one repeated
    assert calls["5"]["class"] == "HookAddOne"
    assert calls["5"]["inputs"] == {"value": [1, 2, 3], "unique_id": ["5"]}
    assert calls["5"]["results"] == [(2,), (3,), (4,)]
    assert calls["6"]["inputs"] == {"values": [2, 3, 4]}  # INPUT_IS_LIST: one call with the list
    assert calls["6"]["results"] == [{"ui": {"sum": [9]}, "result": (9,)}]
    # check_lazy_status goes through it too (once per staging of the lazy node)
    lazy = [c for c in record["calls"] if c["func"] == "check_lazy_status"]
    assert [c["unique_id"] for c in lazy] == ["7", "7"]
    assert lazy[0]["inputs"]["a"] == [None] and lazy[1]["inputs"]["a"] == [9]

    # execute: every step of every node, with ComfyUI's positional arguments
    steps = record["steps"]
    assert {s["node_id"] for s in steps} == EXECUTED
    assert [s["node_id"] for s in steps].count("7") == 2  # PENDING on its lazy input, then run
    for step in steps:
        assert step["nargs"] == 12 and step["prompt_id"] == prompt_id and step["get_cache"]
        assert step["original_prompt"] == PROMPT
        assert step["dynprompt"].get_node(step["node_id"])["class_type"] == step["class_type"]
        assert step["extra_data"]["mark"] == 7
        assert hasattr(step["server"], "send_sync")
        assert step["result"][0].name in ("SUCCESS", "PENDING")
    assert [s["result"][0].name for s in steps if s["node_id"] == "7"] == ["PENDING", "SUCCESS"]
    last = steps[-1]
    assert last["executed"] >= EXECUTED - {last["node_id"]}

    # the outputs are what the unrouted executor gives (a server without the pack: scoping)
    assert entry["outputs"]["6"] == {"sum": [9]} and entry["outputs"]["9"] == {"sum": [9]}
    plain = await start_pack_server(tmp_path / "plain", custom_node_dirs=(EXAMPLE_PACKS,))
    try:
        import execution
        from compat.execution_api import execute as built_in_execute

        plain_session = plain.state.executor.settings.routes.session
        hooked_session = hooked.state.executor.settings.routes.session
        assert plain_session is not hooked_session
        assert plain.state.executor.settings.routes() is None  # no pack replaced a name there
        assert hooked.state.executor.settings.routes() is not None
        with plain_session.activate():
            assert execution.execute is built_in_execute
        with hooked_session.activate():
            assert execution.execute.__name__ == "execute_with_record"
        calls_before, steps_before = len(record["calls"]), len(record["steps"])
        prompt = {k: v for k, v in PROMPT.items() if k in ("1", "2", "3")}
        other = await _run(plain, prompt)
        assert other["status"]["status_str"] == "success"
        assert (len(record["calls"]), len(record["steps"])) == (calls_before, steps_before)
        assert other["outputs"]["3"]["images"][0]["filename"].startswith("hooks")
    finally:
        await plain.close()


async def test_a_wrapper_that_raises_fails_that_node_and_the_server_goes_on(hooked):
    record = _record(hooked)
    prompt = {"4": {"class_type": "HookNumbers", "inputs": {"start": 98, "count": 2}},
              "5": {"class_type": "HookAddOne", "inputs": {"value": ["4", 0]}},
              "6": {"class_type": "HookSum", "inputs": {"values": ["5", 0]}}}
    entry = await _run(hooked, prompt)
    assert entry["status"]["status_str"] == "error"
    [error] = [data for kind, data in entry["status"]["messages"] if kind == "execution_error"]
    assert error["node_id"] == "5" and "the map wrapper refuses 99" in error["exception_message"]
    assert error["exception_type"] == "RuntimeError"

    entry = await _run(hooked, PROMPT, extra_data={"hook_raise_in_execute": "2"})
    assert entry["status"]["status_str"] == "error"
    [error] = [data for kind, data in entry["status"]["messages"] if kind == "execution_error"]
    assert error["node_id"] == "2" and "the execute wrapper refuses node 2" in error["exception_message"]
    assert not [c for c in record["calls"][-20:] if c["unique_id"] == "2" and c["prompt_id"] == entry["prompt"][1]]

    entry = await _run(hooked, {"4": PROMPT["4"], "5": PROMPT["5"], "6": PROMPT["6"]})
    assert entry["status"]["status_str"] == "success" and entry["outputs"]["6"] == {"sum": [9]}


# -- the built-ins, called as packs call them ---------------------------------------------------
class _Node:
    FUNCTION = "run"
    RETURN_TYPES = ("INT",)

    def __init__(self):
        self.seen = []

    def run(self, a, b):
        self.seen.append((a, b))
        return (a + b,)


def test_the_built_in_maps_over_slices_repeating_the_last_element():
    from compat.execution_api import _async_map_node_over_list

    node, prefixes = _Node(), []
    results = asyncio.run(_async_map_node_over_list(str(uuid.uuid4()), "n1", node, {"a": [1, 2, 3], "b": [10]}, "run",
                                                    pre_execute_cb=prefixes.append))
    assert results == [(11,), (12,), (13,)] and node.seen == [(1, 10), (2, 10), (3, 10)]
    assert prefixes == [0, 1, 2]


def test_the_built_in_passes_whole_lists_for_input_is_list_and_skips_blocked_calls():
    from compat.execution_api import _async_map_node_over_list
    from graph.expansion import ExecutionBlocker

    class Listed(_Node):
        INPUT_IS_LIST = True

    node = Listed()
    assert asyncio.run(_async_map_node_over_list(str(uuid.uuid4()), "n1", node, {"a": [1, 2], "b": [3]}, "run")) \
        == [([1, 2, 3],)]
    assert node.seen == [([1, 2], [3])]
    block = ExecutionBlocker("stop")
    seen = []
    results = asyncio.run(_async_map_node_over_list(str(uuid.uuid4()), "n1", _Node(), {"a": [1, block], "b": [0]},
                                                    "run", execution_block_cb=lambda b: seen.append(b) or "blocked"))
    assert results == [(1,), "blocked"] and seen == [block]


def test_the_built_in_makes_async_functions_tasks_and_sets_the_node_context():
    from compat.execution_api import _async_map_node_over_list, resolve_map_node_over_list_results
    from compat.execution_context import get_executing_context

    prompt_id = str(uuid.uuid4())

    class Slow:
        FUNCTION = "run"

        async def run(self, x):
            context = get_executing_context()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return (x, context.node_id, context.list_index)

    async def main():
        results = await _async_map_node_over_list(prompt_id, "n7", Slow(), {"x": [1, 2]}, "run")
        assert all(isinstance(r, asyncio.Task) for r in results)
        return await resolve_map_node_over_list_results(results)

    assert asyncio.run(main()) == [(1, "n7", 0), (2, "n7", 1)]


def test_the_execution_module_has_todays_names():
    import inspect

    import execution

    assert inspect.iscoroutinefunction(execution._async_map_node_over_list)
    assert inspect.iscoroutinefunction(execution.execute)
    assert list(inspect.signature(execution._async_map_node_over_list).parameters) == [
        "prompt_id", "unique_id", "obj", "input_data_all", "func", "allow_interrupt", "execution_block_cb",
        "pre_execute_cb", "v3_data"]
    assert list(inspect.signature(execution.execute).parameters) == [
        "server", "dynprompt", "caches", "current_item", "extra_data", "executed", "prompt_id", "execution_list",
        "pending_subgraph_results", "pending_async_nodes", "ui_outputs", "asset_manager"]
    assert execution.map_node_over_list is None
    assert not hasattr(execution, "_map_node_over_list")


def test_execute_outside_a_routed_step_says_so():
    from compat.execution_api import execute

    with pytest.raises(RuntimeError, match="not the node the executor is running"):
        asyncio.run(execute(None, None, None, "1", {}, set(), str(uuid.uuid4()), None, {}, {}, {}, None))


def test_main_sets_comfyuis_environment_for_custom_nodes_only_as_the_entry_point():
    """ComfyUI's main.py sets HF_HUB_DISABLE_TELEMETRY=1 and DO_NOT_TRACK=1 "for custom nodes" when
    run (Lora-Manager reads the first to know it is not standalone); importing it sets nothing."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    code = ("import os, runpy, sys\n"
            "mode = sys.argv[1]\n"
            "sys.argv = ['main.py', '--help']\n"
            "if mode == 'run':\n"
            "    try:\n"
            "        runpy.run_path('main.py', run_name='__main__')\n"
            "    except SystemExit:\n"
            "        pass\n"
            "else:\n"
            "    import main\n"
            "print(os.environ.get('HF_HUB_DISABLE_TELEMETRY'), os.environ.get('DO_NOT_TRACK'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    seen = {}
    for mode in ("run", "import"):
        out = subprocess.run([sys.executable, "-c", code, mode], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        seen[mode] = out.stdout.strip().splitlines()[-1]
    assert seen == {"run": "1 1", "import": "None None"}
