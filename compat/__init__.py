"""ComfyUI's import surface for node packs (comfy.*, comfy_api, comfy_execution, folder_paths, server).

Thin facades over our own modules. A host (web/bootstrap.py, the headless runner) calls
`compat.install(env, registry)` once per server; the returned `CompatSession` loads packs
(`session.load_packs(dirs)`: prestartup scripts, then `graph.packs.load_custom_nodes` with the
import hook active and V3 `comfy_entrypoint` discovery), drives GraphBuilder's default prefix
(`Executor(before_node_call=[session.before_node_call])`) and, once the server state exists,
serves packs' routes and events (`session.bind(state)`). Nothing of ours imports this package.

Layout:
    session        CompatSession: the per-server state packs see; `active()`
    finder         the meta-path finder mapping ComfyUI's module names onto comfy_surface/
    comfy_surface/ the modules packs import, under ComfyUI's names (thin re-exports)
    folders        folder_paths
    progress       comfy.utils.ProgressBar
    tensors        comfy.utils tensor/file helpers
    devices        comfy.model_management
    models         comfy.sd, comfy.samplers, comfy.sample
    cli_args       comfy.cli_args (the server's flags, ComfyUI's names)
    io_types       comfy.comfy_types (IO, ComfyNodeABC, InputTypeDict)
    graph_builder  comfy_execution.graph_utils (GraphBuilder default-prefix protocol)
    prompt_server  server.PromptServer facade
    previews       latent_preview.prepare_callback
    helpers        node_helpers
    startup        prestartup scripts
    status         GET /custom_nodes/status
    v3/            comfy_api: io schema, ui helpers, ComfyExtension, ComfyAPI, V3 -> NodeSpec adapter,
                   comfy_entrypoint discovery
"""
from __future__ import annotations

from typing import Any


def install(env: Any, registry: Any) -> Any:
    """Bind the pack-facing surface to `env` (nodes.environment.Environment) and `registry`;
    installs the import hook (kept for the life of the process) and returns the `CompatSession`."""
    from compat.session import CompatSession

    return CompatSession.install(env, registry)
