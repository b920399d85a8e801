"""ComfyUI's top-level `execution` module over our engine: `PromptExecutor` runs prompts and
reports through `add_message` / `handle_execution_error` (so a pack wrapping them, as
Impact-Pack does, sees every message), `get_input_data` resolves a node's inputs as ComfyUI's,
`validate_inputs` fills ComfyUI's `validated` dict, and the queue names exist."""
from __future__ import annotations

import pytest


class Const:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0})}}

    def run(self, value):
        return (value,)


class AddAndShow:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT", {"default": 0}), "b": ("INT", {"default": 0})},
                "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID", "extra_pnginfo": "EXTRA_PNGINFO"}}

    def run(self, a, b, prompt=None, unique_id=None, extra_pnginfo=None):
        if a < 0:
            raise ValueError(f"negative: {a}")
        return {"ui": {"sum": [a + b]}, "result": (a + b,)}


class Sent:
    """A stand-in for PromptServer.instance: what add_message sends."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict, str | None]] = []

    def send_sync(self, event, data, sid=None):
        self.messages.append((event, data, sid))


@pytest.fixture
def registered(session):
    session.registry.add_v1("Const", Const)
    session.registry.add_v1("AddAndShow", AddAndShow)
    return session


PROMPT = {"1": {"class_type": "Const", "inputs": {"value": 2}},
          "2": {"class_type": "AddAndShow", "inputs": {"a": ["1", 0], "b": 5}}}


def test_prompt_executor_runs_a_prompt_and_reports_through_add_message(registered):
    import execution

    server = Sent()
    executor = execution.PromptExecutor(server)
    executor.execute(PROMPT, "p1", {"client_id": "me"}, ["2"])
    assert executor.success is True
    assert executor.history_result["outputs"] == {"2": {"sum": [7]}}
    kinds = [event for event, _data in executor.status_messages]
    assert kinds[0] == "execution_start" and kinds[-1] == "execution_success"
    assert all("timestamp" in data and data.get("prompt_id") == "p1" for _e, data in executor.status_messages
               if _e in ("execution_start", "execution_success"))
    assert {sid for _e, _d, sid in server.messages} == {"me"}  # sent to the prompt's client
    # the executor keeps its cache across calls: the second run executes nothing
    executor.execute(PROMPT, "p2", {"client_id": "me"}, ["2"])
    cached = [data for event, data in executor.status_messages if event == "execution_cached"]
    assert sorted(cached[0]["nodes"]) == ["1", "2"]
    executor.reset()
    executor.execute(PROMPT, "p3", {}, ["2"])
    assert [data for event, data in executor.status_messages if event == "execution_cached"][0]["nodes"] == []


def test_a_wrapped_handle_execution_error_sees_the_failure(registered, monkeypatch):
    import execution

    seen = []
    original = execution.PromptExecutor.handle_execution_error

    def wrapper(self, prompt_id, prompt, current_outputs, executed, error, ex):
        seen.append((prompt_id, error["node_id"], error["exception_type"], type(ex).__name__, sorted(executed)))
        return original(self, prompt_id, prompt, current_outputs, executed, error, ex)

    monkeypatch.setattr(execution.PromptExecutor, "handle_execution_error", wrapper)
    server = Sent()
    executor = execution.PromptExecutor(server)
    bad = {"1": {"class_type": "Const", "inputs": {"value": -3}},
           "2": {"class_type": "AddAndShow", "inputs": {"a": ["1", 0], "b": 5}}}
    executor.execute(bad, "bad", {"client_id": "me"}, ["2"])
    assert executor.success is False
    assert seen == [("bad", "2", "ValueError", "NodeExecutionError", ["1"])]
    error = [data for event, data in executor.status_messages if event == "execution_error"][0]
    assert error["node_type"] == "AddAndShow" and error["exception_message"].strip() == "negative: -3"
    assert error["current_inputs"]["a"] == [-3] and server.messages[-1][0] == "execution_error"


def test_get_input_data_resolves_links_widgets_and_hidden_inputs(registered):
    import execution
    from graph.prompt import DynamicPrompt

    dyn = DynamicPrompt(PROMPT)
    data, missing, v3 = execution.get_input_data(PROMPT["2"]["inputs"], AddAndShow, "2", {"1": (2,)}, dyn,
                                                 {"extra_pnginfo": {"workflow": 1}})
    assert data == {"a": 2, "b": [5], "prompt": [PROMPT], "unique_id": ["2"], "extra_pnginfo": [{"workflow": 1}]}
    assert missing == {} and v3 == {}
    data, missing, _ = execution.get_input_data(PROMPT["2"]["inputs"], AddAndShow, "2")
    assert missing == {"a": True} and data["a"] == (None,) and data["prompt"] == [{}]


async def test_validate_inputs_fills_comfyuis_validated_dict(registered):
    import execution

    validated: dict = {}
    ok, errors, node = await execution.validate_inputs("v", PROMPT, "2", validated)
    assert (ok, errors, node) == (True, [], "2") and set(validated) == {"1", "2"}
    bad = {**PROMPT, "1": {"class_type": "Const", "inputs": {"value": "two"}}}
    validated = {}
    ok, errors, _ = await execution.validate_inputs("v", bad, "2", validated)
    assert ok is False and validated["1"][0] is False and validated["1"][1][0]["type"] == "invalid_input_type"
    result = await execution.validate_prompt("v", bad, None)
    assert result[0] is False and list(result[3]) == ["1"] and result[2] == []


def test_execution_names_and_the_queue_before_a_server(registered):
    import execution
    from compat.pack_queue import QueueOwnedByServerError, ServerNotStartedError
    from server import PromptServer

    assert execution.ExecutionResult.PENDING.value == 2
    assert execution.SENSITIVE_EXTRA_DATA_KEYS == ("auth_token_comfy_org", "api_key_comfy_org")
    queue = PromptServer.instance.prompt_queue
    assert isinstance(queue, execution.PromptQueue)
    with pytest.raises(ServerNotStartedError, match="no server is running"):
        queue.get_tasks_remaining()
    with pytest.raises(QueueOwnedByServerError):
        queue.get()
