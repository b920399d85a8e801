"""ComfyUI's import surface for node packs (comfy.*, comfy_api, comfy_execution, folder_paths, server).

Thin facades over our own modules. A host (web/bootstrap.py, the headless runner) calls
`compat.install(env, registry)` once per server; the returned `CompatSession` loads packs
(`session.load_packs(dirs)`: prestartup scripts, then `graph.packs.load_custom_nodes` with the
import hook active and V3 `comfy_entrypoint` discovery), drives GraphBuilder's default prefix
(`Executor(before_node_call=[session.before_node_call])`) and, once the server state exists,
serves packs' routes and events (`session.bind(state)`). Only the hosts (web/, main.py) import this
package: graph/, nodes/ and comfy_core/ never do (tests/test_import_graph.py). ComfyUI's names on
our `nodes` package reach `node_facades` through the installed import hook.

Layout:
    session        CompatSession: the per-server state packs see
    active         `active()`: the session packs see now
    node_facades   ComfyUI's `nodes` module names (NODE_CLASS_MAPPINGS, KSampler, ...) over our specs
    finder         the meta-path finder mapping ComfyUI's module names onto comfy_surface/
    comfy_surface/ the modules packs import, under ComfyUI's names (thin re-exports)
    folders        folder_paths
    progress       comfy.utils.ProgressBar
    tensors        comfy.utils tensor/file helpers
    devices        comfy.model_management (with device_memory, device_dtypes, device_attention;
                   device_globals: the module globals ComfyUI computes at import)
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

from typing import Any, Mapping


def install(env: Any, registry: Any, *, comfy_args: Mapping[str, Any] | None = None) -> Any:
    """Bind the pack-facing surface to `env` (nodes.environment.Environment) and `registry`;
    installs the import hook (kept for the life of the process) and returns the `CompatSession`.
    `comfy_args` is ComfyUI's `args` as the host parsed them (attribute name -> value), what
    `comfy.cli_args.args` answers; the hosts build it (web/comfy_args.py), compat never imports them."""
    from compat.mp_model_classes import install_model_classes
    from compat.session import CompatSession

    session = CompatSession.install(env, registry, comfy_args=comfy_args)
    # models the session's node calls load are ComfyUI's comfy.model_base classes
    install_model_classes(session.extension_points)
    return session
