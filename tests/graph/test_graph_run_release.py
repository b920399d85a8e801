"""A finished run's per-node state is freed by reference counting, without the cyclic collector
(issue 34: a full collection walks every live object with the GIL held, so a big prompt's
leftovers waiting for one stopped the server's event loop for as long)."""
from __future__ import annotations

import gc
import weakref

import pytest

import graph.executor
from graph.executor import Executor
from graph.run import Run
from tests.graph.helpers import Flag, node, run_prompt


class WatchedRun(Run):
    """A `Run` that lets the test hold weak references to it and to its per-node parts."""

    made: list[dict[str, weakref.ref]] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        WatchedRun.made.append({"run": weakref.ref(self), "progress": weakref.ref(self.progress),
                                "schedule": weakref.ref(self.schedule),
                                "signatures": weakref.ref(self.signatures),
                                "dynprompt": weakref.ref(self.dynprompt)})


@pytest.fixture
def no_cyclic_gc(monkeypatch):
    WatchedRun.made = []
    monkeypatch.setattr(graph.executor, "Run", WatchedRun)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


PROMPTS = {
    "success": {"1": node("IntConst", value=4), "2": node("Add", a=["1", 0], b=1),
                "3": node("Progress", steps=2), "4": node("Collect", value=["2", 0]),
                "5": node("Collect", value=["3", 0])},
    "node error": {"1": node("IntConst", value=4), "2": node("Fail", value=["1", 0]),
                   "3": node("Collect", value=["2", 0])},
    "async nodes": {"1": node("AsyncWait", value=1, seconds=0.0), "2": node("AsyncWait", value=2, seconds=0.0),
                    "3": node("Add", a=["1", 0], b=["2", 0]), "4": node("Collect", value=["3", 0])},
    "async error": {"1": node("AsyncFail", value=1), "2": node("Collect", value=["1", 0])},
    "expansion": {"1": node("IntConst", value=1), "2": node("Repeat", value=["1", 0], count=3, step=2),
                  "3": node("Collect", value=["2", 0])},
}


@pytest.mark.parametrize("name", list(PROMPTS))
async def test_a_finished_runs_state_is_freed_without_the_cyclic_collector(registry, no_cyclic_gc, name):
    executor = Executor(registry)
    try:
        outcome = await run_prompt(executor, PROMPTS[name], f"p-{name}", sink=lambda event: None)
        assert outcome.status == ("error" if "error" in name else "success")
        (made,) = WatchedRun.made
        alive = [part for part, ref in made.items() if ref() is not None]
        assert alive == []  # freed by reference counting alone (gc is disabled)
    finally:
        executor.close()


async def test_an_interrupted_runs_state_is_freed_too(registry, no_cyclic_gc):
    executor = Executor(registry)
    try:
        outcome = await run_prompt(executor, PROMPTS["success"], "p-int", sink=lambda event: None,
                                   interrupt=Flag(True))
        assert outcome.status == "interrupted"
        assert [part for part, ref in WatchedRun.made[0].items() if ref() is not None] == []
    finally:
        executor.close()


async def test_progress_reported_after_the_end_is_dropped(registry):
    events = []
    executor = Executor(registry)
    try:
        await run_prompt(executor, {"1": node("Progress", steps=1), "2": node("Collect", value=["1", 0])},
                         "p-late", sink=events.append)
    finally:
        executor.close()
    count = len(events)
    # what a node's forgotten thread would do after its prompt ended: nothing reaches the sink
    from graph.progress import ProgressState
    from graph.prompt import DynamicPrompt

    state = ProgressState("p", DynamicPrompt({"1": node("IntConst", value=1)}), events.append)
    state.start("1")
    assert len(events) == count + 1
    state.close()
    state.update("1", 1, 2)
    state.finish("1")
    assert len(events) == count + 1 and state.get("1") is None
