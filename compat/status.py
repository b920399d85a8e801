"""`GET /custom_nodes/status`: which packs loaded, which failed and why, which of their nodes are
left out of /object_info and why (and their prestartup scripts)."""
from __future__ import annotations

from typing import Any

from aiohttp import web


def pack_status(session: Any) -> dict:
    """The JSON body: `{"packs": [...], "prestartup": [...], "importing": bool}` in load order.
    `importing`: the packs are still importing after the server started listening
    (web/pack_start.py); `packs` then lists the last start's record of them."""
    load = getattr(session.state, "pack_load", None)
    importing = load is not None and not load.done
    packs = []
    for pack in (session.state.packs if importing else session.packs):
        packs.append({
            "name": pack.name, "path": str(pack.path), "ok": pack.ok, "error": pack.error,
            "seconds": round(pack.seconds, 4),
            "nodes": list(pack.nodes) + session.v3_nodes.get(pack.name, []),
            "skipped": list(pack.skipped),
            # node type -> why it is missing from /object_info (INPUT_TYPES() raised or overran)
            "node_errors": dict(pack.node_errors),
            "abandoned": pack.abandoned,  # the import overran its limit (graph/pack_isolation.py)
            "entrypoint_error": session.v3_errors.get(pack.name),
            "web_directory": str(pack.web_directory) if pack.web_directory else None,
        })
    prestartup = [{"name": r.name, "path": str(r.path), "ok": r.ok, "error": r.error,
                   "seconds": round(r.seconds, 4)} for r in session.prestartup]
    return {"packs": packs, "prestartup": prestartup, "importing": importing}


def status_routes(session: Any) -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/custom_nodes/status")
    async def custom_nodes_status(request: web.Request) -> web.Response:
        return web.json_response(pack_status(session))

    return routes
