"""Building a server's state from a `ServerConfig`: environment, registry, packs, executor, store.

`build_environment` and `build_registry` are shared with the headless `main.py run`.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from web.config import ServerConfig
from web.warmup import DeferredMemoryManager

log = logging.getLogger(__name__)


def build_environment(config: ServerConfig) -> tuple[Any, list[Path]]:
    """The node environment and the custom-node folders (default + extra_model_paths yaml)."""
    from nodes.environment import Environment

    overrides = {name: Path(value).resolve() for name, value in (
        ("output_dir", config.output_dir), ("input_dir", config.input_dir),
        ("temp_dir", config.temp_dir), ("user_dir", config.user_dir)) if value is not None}
    env = Environment.rooted_at(config.base_dir, preview_method=config.preview_method,
                                preview_size=config.preview_size, disable_metadata=config.disable_metadata,
                                attention_backend=config.attention_backend,
                                vae_attention_backend=config.vae_attention_backend, mmap=config.mmap, **overrides)
    custom_dirs = [Path(config.base_dir).resolve() / "custom_nodes"]
    for yaml_path in config.extra_model_paths:
        custom_dirs.extend(env.folders.extend_from_yaml(yaml_path))
    if config.custom_node_dirs is not None:
        custom_dirs = [Path(p).resolve() for p in config.custom_node_dirs]
    # Both stay torch-free until a node needs them (web/warmup.py): the memory manager is built
    # on first use, and the loaders turn the dtype names into comfy_core's DtypePolicy.
    env.memory = DeferredMemoryManager(cpu_only=config.cpu,
                                       factory=memory_factory(config.reserve_vram_gb, config.vram_mode))
    env.dtype_policy = config.dtype.policy_names() or None
    env.ensure_dirs()
    # models/ and each kind's folder in it exist from the first start, as in ComfyUI's checkout
    # (packs list `models/<kind>` at import); created here, not shipped in the repository.
    env.folders.create_default_dirs()
    return env, custom_dirs


def memory_factory(reserve_vram_gb: float | None, vram_mode: str | None = None) -> Callable[..., Any] | None:
    """How the deferred memory manager is built from the memory flags: the VRAM mode
    (`--gpu-only --highvram --normalvram --lowvram --novram`, comfy_core.memory_plan.VramMode;
    the CPU ignores them, as ComfyUI) and `--reserve-vram GB`, kept free on the device besides
    the minimum inference memory (ComfyUI's EXTRA_RESERVED_VRAM, comfy/model_management.py).
    None: neither flag was given, the default manager (the device's default mode)."""
    if reserve_vram_gb is None and vram_mode is None:
        return None

    def build(*, cpu_only: bool) -> Any:
        from comfy_core.memory import MemoryManager

        flags = {vram_mode: True} if vram_mode is not None else {}
        return MemoryManager.from_flags(cpu_only=cpu_only, reserve_vram_gb=reserve_vram_gb, **flags)
    return build


def pack_folders(config: ServerConfig, custom_dirs: list[Path]) -> tuple[list[Path], dict]:
    """The custom-node folders packs load from (none when all are disabled and nothing is
    whitelisted), and the loaders' keyword arguments (the whitelist)."""
    whitelist = list(config.whitelist_custom_nodes)
    load_packs = not (config.disable_all_custom_nodes and not whitelist)
    existing = [d for d in custom_dirs if d.is_dir()] if load_packs else []
    kwargs = {"whitelist": whitelist} if config.disable_all_custom_nodes else {}
    return existing, kwargs


def build_registry(config: ServerConfig, custom_dirs: list[Path], *, compat_session: Any = None
                   ) -> tuple[Any, list[Any]]:
    """Built-in nodes plus custom-node packs (unless disabled; the whitelist still loads).

    With a `compat_session` (compat.install), packs load into its registry with ComfyUI's import
    surface, prestartup scripts and V3 entry points (compat/session.py)."""
    from graph.registry import Registry
    from nodes import register_builtin_nodes

    registry = compat_session.registry if compat_session is not None else Registry()
    existing, kwargs = pack_folders(config, custom_dirs)
    if existing and compat_session is not None:
        # ComfyUI's order: prestartup scripts run before torch or any node module is imported.
        compat_session.run_prestartup(existing, **kwargs)
    register_builtin_nodes(registry)
    packs = load_packs(config, registry, existing, kwargs, compat_session) if existing else []
    return registry, packs


def load_packs(config: ServerConfig, registry: Any, existing: list[Path], kwargs: dict,
               compat_session: Any = None) -> list[Any]:
    """Import the packs of `existing` into `registry` (through the compat session when given)."""
    from graph.packs import limits_for_loads, load_custom_nodes

    # how long a pack's import / INPUT_TYPES() may take before it is abandoned (graph/pack_isolation.py)
    with limits_for_loads(pack_limits(config)):
        if compat_session is not None:
            packs = list(compat_session.load_packs(existing, **kwargs))
        else:
            packs = list(load_custom_nodes(registry, existing, **kwargs))
    for pack in packs:
        mark = "" if pack.ok else " (IMPORT FAILED)"
        log.info("%8.3f seconds: %s%s", pack.seconds, pack.path, mark)
    return packs


def deferred_pack_load(config: ServerConfig, custom_dirs: list[Path], session: Any) -> Any:
    """When the last complete pack load's record is still valid (web/pack_start.py): the built-in
    nodes registered, prestartup scripts run, and the packs' import handed back as a
    `DeferredPackLoad` to run once the server listens. Else None (nothing done)."""
    from nodes import register_builtin_nodes
    from web.pack_start import DeferredPackLoad, fingerprint, read_record

    from graph.packs import discover

    existing, kwargs = pack_folders(config, custom_dirs)
    if not existing or not discover(existing):
        return None
    whitelist = kwargs.get("whitelist")
    record = read_record(session.env.user_dir, fingerprint(existing, whitelist))
    if record is None:
        return None
    session.run_prestartup(existing, **kwargs)
    register_builtin_nodes(session.registry)
    session.extension_web_dirs.update(record.extension_web_dirs)
    return DeferredPackLoad(record=record,
                            load=lambda: load_packs(config, session.registry, existing, kwargs, session),
                            fingerprint_after=lambda: fingerprint(existing, whitelist),
                            builtin_names=frozenset(session.registry))


def pack_limits(config: ServerConfig) -> Any:
    """`--custom-node-import-timeout` / `--custom-node-call-timeout` (0: no limit, ComfyUI's way)."""
    from graph.pack_isolation import PackLimits

    return PackLimits(config.custom_node_import_timeout or None, config.custom_node_call_timeout or None)


def _record_in_background(state: Any, custom_dirs: list[Path], session: Any) -> None:
    """Write the next start's pack record for the load just done, in a daemon thread (rendering
    every pack node's /object_info entry takes a moment; the server is not kept waiting for it)."""
    import threading

    from web.pack_start import fingerprint, save_record

    existing, kwargs = pack_folders(state.config, custom_dirs)
    after = fingerprint(existing, kwargs.get("whitelist"))  # now: packs may write files at import
    threading.Thread(target=save_record, args=(state, after, session), name="pack-record", daemon=True).start()


def cache_config(config: ServerConfig) -> Any:
    from graph.cache import CacheConfig

    c = config.cache
    # ComfyUI: `--cache-lru 0` is the classic cache.
    kind = "classic" if c.kind == "lru" and c.size <= 0 else c.kind
    return CacheConfig(kind=kind, size=c.size, ram_headroom_gb=c.ram_headroom_gb)


def build_executor(config: ServerConfig, registry: Any, env: Any, session: Any) -> Any:
    """The executor for `registry` in `env`, with the compat session's hook (shared with the Ray
    worker actors, web/ray_backend/runtime.py)."""
    from compat.execution_api import SessionRoutes
    from graph.executor import Executor

    return Executor(registry, cache=cache_config(config), env=env, before_node_call=[session.before_node_call],
                    recover=env.memory.recover if env.memory else None, routes=SessionRoutes(session))


def build_state(config: ServerConfig, *, registry: Any = None, packs: list[Any] | None = None,
                defer_packs: bool = False) -> Any:
    """Everything a server needs, ready for `web.app.create_app`; prompts a dead server left
    running are recorded as interrupted, pending ones are queued again.

    `registry` (with `packs`) replaces the built-in + custom-node registry (tests, embedders).
    `defer_packs`: when the pack record of the last start is valid, packs import after the server
    listens (`state.pack_load`, web/pack_start.py); a load done here writes the record.
    """
    from web.hub import WebSocketHub
    from web.prompt_queue import PromptQueue
    from web.state import AppState
    from web.store import PromptStore

    import compat
    from graph.registry import Registry
    from web.comfy_args import comfy_args

    started = time.perf_counter()
    env, custom_dirs = build_environment(config)
    pack_load = None
    if registry is None:
        # ComfyUI's import surface for packs; comfy.cli_args answers for this server while packs import
        session = compat.install(env, Registry(), comfy_args=comfy_args(config))
        pack_load = deferred_pack_load(config, custom_dirs, session) if defer_packs else None
        if pack_load is not None:
            registry, packs = session.registry, pack_load.record.pack_results()
        else:
            registry, packs = build_registry(config, custom_dirs, compat_session=session)
    else:
        session = compat.install(env, registry, comfy_args=comfy_args(config))
    packs = list(packs or [])
    executor = build_executor(config, registry, env, session)
    store = PromptStore.open(env.user_dir, max_history=config.max_history)
    recovered = store.recover_interrupted()
    for prompt_id in recovered:
        log.warning("prompt %s was running when the server stopped; recorded as interrupted", prompt_id)
    queue = PromptQueue(store)
    queue.restore(store.pending_items())
    hub = WebSocketHub(lambda: {"exec_info": queue.exec_info()})  # + `paused` while paused (docs/queue.md)
    queue.on_change = hub.broadcast_status
    log.info("state built in %.2f s: %d node types, %d packs, %d prompts pending",
             time.perf_counter() - started, len(registry), len(packs), len(queue.pending()))
    state = AppState(config=config, env=env, registry=registry, executor=executor, store=store, queue=queue,
                     hub=hub, packs=packs, pack_load=pack_load)
    session.bind(state)  # packs' routes, on_prompt handlers, send_sync, GET /custom_nodes/status
    if defer_packs and pack_load is None and packs:
        _record_in_background(state, custom_dirs, session)
    return state
