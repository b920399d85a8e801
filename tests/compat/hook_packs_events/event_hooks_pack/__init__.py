"""A fixture pack written the way the timing and notification packs are (ComfyUI-Dev-Utils'
nodes/execution_time.py): at import it wraps `server.PromptServer.send_sync` on the class, keeping
the original to call, and `execution.execute`, reading `server.last_node_id` before and after the
original to tell a node that ran from one taken from the cache. Its send_sync wrapper records
every event, sends one of its own after each node that ran ("event_hooks.executed") and at the
end (`executing` with node None: "event_hooks.execution_end"), and raises on request
(`RECORD["raise_on"]`, an event type) after sending nothing.

Kept apart from tests/compat/packs: the class attribute it assigns is one per process, so the
test that loads it restores the built-in afterwards."""
import inspect

import execution
import server

RECORD = {"events": [], "steps": [], "raise_on": None}

_original_send_sync = server.PromptServer.send_sync
_original_execute = execution.execute


def send_sync_with_record(self, event, data, sid=None):
    RECORD["events"].append((event, dict(data) if isinstance(data, dict) else data, sid))
    if event == RECORD["raise_on"]:
        raise RuntimeError(f"the send_sync wrapper refuses {event}")
    _original_send_sync(self, event=event, data=data, sid=sid)
    if event == "executing" and isinstance(data, dict) and data.get("node") is None and sid is not None:
        _original_send_sync(self, "event_hooks.execution_end", {"prompt_id": data.get("prompt_id")}, sid)


async def execute_with_record(server_, dynprompt, caches, current_item, extra_data, executed, prompt_id, *args,
                              **kwargs):
    before = server_.last_node_id
    result = await _original_execute(server_, dynprompt, caches, current_item, extra_data, executed, prompt_id,
                                     *args, **kwargs)
    after = server_.last_node_id
    RECORD["steps"].append({"node": current_item, "before": before, "after": after,
                            "client_id": server_.client_id})
    if server_.client_id is not None and before != after:
        server_.send_sync("event_hooks.executed", {"node": current_item, "prompt_id": prompt_id},
                          server_.client_id)
    return result


assert inspect.iscoroutinefunction(_original_execute)
server.PromptServer.send_sync = send_sync_with_record
execution.execute = execute_with_record

NODE_CLASS_MAPPINGS = {}
