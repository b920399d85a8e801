"""`POST /workflow/to_prompt` (also under `/api`): a workflow as the editor saves it (or an
official template), subgraphs included, converted to the API prompt the editor would queue
(`graph.editor_workflow`), and queued directly on request. ComfyUI converts only in the browser
(its issue 1112); this lets scripts run saved workflows without the editor.

Body: the saved workflow itself, or `{"workflow": {...}, "queue": bool, ...}` where the other
fields are `POST /prompt`'s (`client_id`, `prompt_id`, `extra_data`, `front`, `number`,
`partial_execution_targets`). Answers 200 `{"prompt": {...}}`; with `"queue": true`, the prompt
is validated and queued as `POST /prompt` does (the workflow goes into
`extra_data.extra_pnginfo.workflow`, as the editor sends it, so saved images carry it) and the
answer adds `prompt_id`, `number`, `node_errors`, or is `POST /prompt`'s 400 with the `prompt`.
A body that is not a saved workflow is a 400 `{"error": {"type": "invalid_workflow", ...}}`;
node types this server lacks, a 400 of type `missing_node_type` naming them
(`extra_info.node_types`).
"""
from __future__ import annotations

from typing import Any

from aiohttp import web

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, is_editor_workflow, unknown_types
from web.bodies import read_json
from web.pack_start import node_definitions
from web.state import state_of
from web.submission import request_error, submit_prompt

QUEUE_FIELDS = ("client_id", "prompt_id", "extra_data", "front", "number", "partial_execution_targets")


def _error(error_type: str, message: str, details: str = "", **extra_info: Any) -> web.Response:
    body = request_error(error_type, message, details)
    body["error"]["extra_info"] = extra_info
    return web.json_response(body, status=400)


def workflow_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.post("/workflow/to_prompt")
    async def to_prompt(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        wrapped = "workflow" in body and not is_editor_workflow(body)
        workflow = body.get("workflow") if wrapped else body
        queue = body.get("queue", False) if wrapped else False
        if not isinstance(queue, bool):
            return _error("invalid_request", "Invalid request field 'queue'", "'queue' must be true or false")
        if not is_editor_workflow(workflow):
            return _error("invalid_workflow", "Not a saved workflow",
                          "expected the editor's saved workflow: an object with \"nodes\" (a list) and \"links\""
                          + (", or {\"workflow\": {...}}" if not wrapped else ""))
        state = state_of(request)
        node_defs = await node_definitions(state)
        try:
            missing = unknown_types(workflow, node_defs)
            if missing:
                return _error("missing_node_type", "Node types not found",
                              f"the workflow uses node types this server does not have: {', '.join(missing)}",
                              node_types=missing)
            prompt = editor_to_prompt(workflow, node_defs)
        except EditorWorkflowError as exc:
            return _error("invalid_workflow", "The workflow cannot be converted", str(exc))
        if not queue:
            return web.json_response({"prompt": prompt})
        submission: dict[str, Any] = {key: body[key] for key in QUEUE_FIELDS if key in body}
        extra = submission.get("extra_data")
        if extra is None or isinstance(extra, dict):
            extra = dict(extra or {})
            pnginfo = extra.get("extra_pnginfo")
            if pnginfo is None or isinstance(pnginfo, dict):
                extra["extra_pnginfo"] = {"workflow": workflow, **(pnginfo or {})}
            submission["extra_data"] = extra
        submission["prompt"] = prompt
        status, payload = await submit_prompt(state, submission)
        return web.json_response({**payload, "prompt": prompt}, status=status)

    return routes
