"""A pack that replaces ComfyUI's `execution.validate_prompt` (Haoming02's diffusion-cg and
resharpen reset their per-prompt state there) is called by POST /prompt with ComfyUI's arguments,
and what it answers decides, as in ComfyUI's `post_prompt`; a replacement that raises is a 400,
never a 500, and the queue goes on."""
from __future__ import annotations

import uuid

from tests.compat.compat_harness import start_pack_server

PACK = '''
import execution

CALLS = []
_original = execution.validate_prompt


async def validate_with_reset(prompt_id, prompt, partial_execution_list):
    CALLS.append((prompt_id, sorted(prompt), partial_execution_list))
    if any(node.get("inputs", {}).get("filename_prefix") == "refuse" for node in prompt.values()):
        return (False, {"type": "prompt_refused", "message": "refused by the pack", "details": "",
                        "extra_info": {}}, [], {})
    if any(node.get("inputs", {}).get("filename_prefix") == "crash" for node in prompt.values()):
        raise RuntimeError("the pack's validator broke")
    return await _original(prompt_id, prompt, partial_execution_list)


execution.validate_prompt = validate_with_reset
NODE_CLASS_MAPPINGS = {}
'''


def _prompt(prefix: str) -> dict:
    return {"1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
            "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": prefix}}}


async def test_post_prompt_validates_through_a_packs_replacement(tmp_path):
    pack = tmp_path / "packs" / "validation_hook"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PACK)
    server = await start_pack_server(tmp_path / "base", custom_node_dirs=(tmp_path / "packs",))
    try:
        [loaded] = [p for p in server.state.packs if p.name == "validation_hook"]
        assert loaded.ok, loaded.error
        calls = loaded.module.CALLS

        prompt_id = str(uuid.uuid4())
        status, body = await server.post_prompt(_prompt("kept"), prompt_id=prompt_id)
        assert status == 200, body
        assert calls == [(prompt_id, ["1", "2"], None)]
        entry = await server.wait_history(prompt_id, timeout=60)
        assert entry["status"]["status_str"] == "success"

        status, body = await server.post_prompt(_prompt("refuse"))
        assert status == 400 and body["error"]["message"] == "refused by the pack" and body["node_errors"] == {}
        status, body = await server.post_prompt(_prompt("crash"))
        assert status == 400 and "the pack's validator broke" in body["error"]["details"]
        # an invalid prompt still gets the engine's node errors through the pack's call of the original
        bad = _prompt("kept")
        bad["1"]["inputs"]["width"] = "wide"
        status, body = await server.post_prompt(bad)
        assert status == 400 and "1" in body["node_errors"]
        assert len(calls) == 4
    finally:
        await server.close()
