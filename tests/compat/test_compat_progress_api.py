"""ComfyUI's `comfy_execution.progress` over our engine's progress, through the fixture pack
tests/compat/api_packs/progress_pack: a pack's `update_progress` for its running node reaches the
client as the engine's `progress` / `progress_state` messages, its own handler added with
`add_progress_handler` sees every registry event with the prompt's id, progress of other ids
reaches handlers only, and each prompt gets its own registry."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PACK = Path(__file__).parent / "api_packs" / "progress_pack" / "__init__.py"


class Sent:
    def __init__(self) -> None:
        self.messages: list = []

    def send_sync(self, event, data, sid=None):
        self.messages.append((event, data, sid))


@pytest.fixture
def pack(session):
    spec = importlib.util.spec_from_file_location("progress_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, cls in module.NODE_CLASS_MAPPINGS.items():
        session.registry.add_v1(name, cls)
    yield module
    sys.modules.pop("progress_pack_under_test", None)


def test_a_packs_registry_progress_reaches_the_client_and_its_handler(pack):
    import execution

    server = Sent()
    prompt = {"7": {"class_type": "PP_StepsWithProgress", "inputs": {"steps": 4}}}
    execution.PromptExecutor(server).execute(prompt, "p1", {"client_id": "me"}, ["7"])
    progress = [(d["value"], d["max"]) for e, d, _ in server.messages if e == "progress" and d.get("node") == "7"]
    assert progress[:3] == [(1, 4), (2, 4), (3, 4)]
    states = [d["nodes"] for e, d, _ in server.messages if e == "progress_state"]
    assert any(n.get("7", {}).get("value") == 3 and n["7"]["max"] == 4 for n in states)
    assert not any("elsewhere" in n for n in states)  # the engine reports the nodes it runs
    calls = pack.HANDLER.calls
    assert ("update", "7", "p1", 1, 4, pack_state("Running")) in calls
    assert calls[0] == ("start", "elsewhere", "p1", pack_state("Running"))
    assert ("update", "elsewhere", "p1", 1, 2, pack_state("Running")) in calls and calls[-1] == ("finish", "elsewhere", "p1", 2)


def pack_state(name: str):
    from comfy_execution.progress import NodeState

    return NodeState[name]


def test_each_prompt_gets_its_own_registry_and_handlers_are_reset(session):
    from comfy_execution import progress
    from graph.context import NodeContext, set_current, _current

    class Counting(progress.ProgressHandler):
        def __init__(self):
            super().__init__("counting")
            self.resets = 0
            self.updates = []

        def reset(self):
            self.resets += 1

        def update_handler(self, node_id, value, max_value, state, prompt_id, image=None):
            self.updates.append((node_id, value))

    reports = []
    token = set_current(NodeContext("a", "1", "1", None, None, report=lambda v, m, p: reports.append((v, m, p))))
    try:
        handler = Counting()
        progress.add_progress_handler(handler)
        first = progress.get_progress_state()
        assert first.prompt_id == "a" and progress.get_progress_state() is first
        first.disable_handler("counting")
        first.update_progress("1", 1, 2, ("JPEG", "image", 512))
        assert handler.updates == [] and reports == [(1, 2, ("JPEG", "image", 512))]
        first.enable_handler("counting")
        first.update_progress(1, 2, 2)  # ComfyUI's ids may be ints: the running node all the same
        assert handler.updates == [(1, 2)] and reports[-1] == (2, 2, None)
    finally:
        _current.reset(token)
    token = set_current(NodeContext("b", "1", "1", None, None))
    try:
        second = progress.get_progress_state()
        assert second is not first and second.prompt_id == "b" and handler.resets == 1 and not second.handlers
    finally:
        _current.reset(token)
    progress.reset_progress_state("c", None)
    assert progress.get_progress_state().prompt_id == "c"
    first.unregister_handler("counting")
    assert "counting" not in first.handlers and handler.resets == 2


def test_the_cli_and_web_handlers(session):
    from comfy_execution import progress

    registry = progress.ProgressRegistry("p", None)
    cli = progress.CLIProgressHandler()
    server = Sent()
    server.client_id = "me"
    web = progress.WebUIProgressHandler(server)
    for handler in (cli, web):
        handler.set_registry(registry)
        registry.register_handler(handler)
    registry.start_progress("3")
    registry.update_progress("3", 2, 5, ("JPEG", "img", 256))
    assert cli.progress_bars["3"].n == 2 and cli.progress_bars["3"].total == 5
    registry.finish_progress("3")
    assert "3" not in cli.progress_bars
    kinds = [e for e, _d, _s in server.messages]
    assert kinds == ["progress_state", "progress_state", 4, "progress_state"]  # 4: preview with metadata
    last = server.messages[-1][1]
    assert last["nodes"]["3"]["state"] == "finished" and last["nodes"]["3"]["value"] == 5
    assert server.messages[2][1] == (("JPEG", "img", 256), {"node_id": "3", "prompt_id": "p", "display_node_id": "3",
                                                             "parent_node_id": None, "real_node_id": "3"})
