"""Command line: `python main.py [serve] [FLAGS]` serves (http://127.0.0.1:8188 by default);
`python main.py run FILE [FLAGS]` runs one workflow without a server: an API-format prompt, a
workflow saved by the editor or a template (subgraphs included), or an image / video file that
carries its workflow. `python main.py users add NAME --role admin` manages the accounts of the
`--users` mode (web/auth/cli.py, docs/auth.md).

Every ComfyUI 0.3.64 flag is accepted, with its spelling and value shape (web/flags.py); those
that change nothing on this build are named in one warning at start-up. A flag ComfyUI does not
have either is an error (exit status 2) that names it.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, MutableMapping, Sequence, TextIO

from web.auth.settings import AuthSettings
from web.config import DEFAULT_MAX_UPLOAD_MB, DEFAULT_PORT, CacheSettings, DtypeSettings, RaySettings, ServerConfig
from web.flags import (ALL_INTERFACES, LOCAL_RAY, add_common_flags, add_ray_flags, add_server_flags,
                       attention_backends, comfy_namespace, component_dtype, flags_without_effect, vram_mode)

if TYPE_CHECKING:
    from comfy_core.folders import ModelFolders

log = logging.getLogger("main")
__all__ = ["ALL_INTERFACES", "build_run_parser", "build_serve_parser", "config_from_args", "main"]


def build_serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="main.py", description="Serve the node-graph engine (ComfyUI-compatible API and editor); "
                                    "'main.py serve' is the same. 'main.py run FILE' runs a workflow "
                                    "without a server (see 'main.py run --help').",
        allow_abbrev=False)
    add_server_flags(parser)
    add_common_flags(parser)
    add_ray_flags(parser)
    return parser


def build_run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="main.py run", allow_abbrev=False,
        description="Run one workflow without a server and exit (0 done, 1 invalid workflow or a node failed, "
                    "2 the file cannot be read, 130 interrupted).")
    parser.add_argument("workflow", type=Path, metavar="FILE",
                        help="an API-format prompt ('Export (API)' in the editor, or a saved POST /prompt body); "
                             "a workflow saved by the editor or an official template, subgraphs included; or a "
                             "PNG / WebP image or MP4 / WebM video saved with its workflow (the prompt it "
                             "embeds is run)")
    add_common_flags(parser)
    return parser


def config_from_args(args: argparse.Namespace, argv: Sequence[str]) -> ServerConfig:
    base = (args.base_directory or Path.cwd()).resolve()
    if args.cache_none:
        cache = CacheSettings(kind="none")
    elif args.cache_ram is not None:
        cache = CacheSettings(kind="ram", ram_headroom_gb=args.cache_ram)
    elif args.cache_lru:
        cache = CacheSettings(kind="lru", size=args.cache_lru)
    else:
        cache = CacheSettings(kind="classic")
    listen = getattr(args, "listen", "127.0.0.1")
    extra = tuple(p for group in (args.extra_model_paths_config or []) for p in group)
    comfy = comfy_namespace(args)
    model_attention, vae_attention = attention_backends(args)
    tls_key, tls_cert = getattr(args, "tls_keyfile", None), getattr(args, "tls_certfile", None)
    return ServerConfig(
        base_dir=base,
        listen=tuple(h.strip() for h in listen.split(",") if h.strip()),
        port=getattr(args, "port", DEFAULT_PORT),
        output_dir=args.output_directory,
        input_dir=args.input_directory,
        temp_dir=args.temp_directory / "temp" if args.temp_directory else None,
        user_dir=args.user_directory,
        extra_model_paths=extra,
        cpu=args.cpu,
        dtype=DtypeSettings.from_flags(force_fp16=args.force_fp16, force_fp32=args.force_fp32,
                                       unet=component_dtype(args, "unet"), vae=component_dtype(args, "vae"),
                                       text_enc=component_dtype(args, "text_enc")),
        cache=cache,
        disable_all_custom_nodes=args.disable_all_custom_nodes,
        whitelist_custom_nodes=tuple(args.whitelist_custom_nodes),
        custom_node_import_timeout=args.custom_node_import_timeout,
        custom_node_call_timeout=args.custom_node_call_timeout,
        max_upload_size_mb=getattr(args, "max_upload_size", DEFAULT_MAX_UPLOAD_MB),
        **connection_limits(args),
        cors_origin=getattr(args, "enable_cors_header", None),
        preview_method=args.preview_method,
        preview_size=args.preview_size,
        verbose=args.verbose == "DEBUG",
        quick_test_for_ci=getattr(args, "quick_test_for_ci", False),
        argv=("main.py", *argv),
        tls_keyfile=Path(tls_key) if tls_key else None,
        tls_certfile=Path(tls_cert) if tls_cert else None,
        front_end_root=getattr(args, "front_end_root", None),
        disable_metadata=args.disable_metadata,
        attention_backend=model_attention,
        vae_attention_backend=vae_attention,
        mmap=not args.disable_mmap,
        reserve_vram_gb=args.reserve_vram,
        vram_mode=vram_mode(args),
        deterministic=args.deterministic,
        cuda_device=args.cuda_device,
        default_device=args.default_device,
        oneapi_device_selector=args.oneapi_device_selector,
        auto_launch=comfy["auto_launch"],
        print_server=not getattr(args, "dont_print_server", False),
        log_stdout=args.log_stdout,
        compress_response_body=getattr(args, "enable_compress_response_body", False),
        enable_assets=getattr(args, "enable_assets", False) and not getattr(args, "disable_assets", False),
        enable_asset_hashing=getattr(args, "enable_asset_hashing", False),
        ray=ray_settings(args),
        auth=auth_settings(args),
        multi_user=getattr(args, "multi_user", False),
        comfy_flags=comfy,
    )


def auth_settings(args: argparse.Namespace) -> AuthSettings | None:
    """--users and its limits (web/auth/), or None: the single-user server."""
    if not getattr(args, "users", False):
        return None
    return AuthSettings(prompts_per_minute=args.user_prompt_rate, queue_quota=args.user_queue_quota)


def connection_limits(args: argparse.Namespace) -> dict:
    """--header-timeout, --body-timeout, --max-connections-per-client, --max-ws-message-size,
    --ws-heartbeat as ServerConfig fields (absent for `main.py run`, which opens no port)."""
    names = {"header_timeout": "header_timeout", "body_timeout": "body_timeout",
             "max_connections_per_client": "max_connections_per_client",
             "max_ws_message_size": "max_ws_message_mb", "ws_heartbeat": "ws_heartbeat"}
    return {field: getattr(args, dest) for dest, field in names.items() if hasattr(args, dest)}


def ray_settings(args: argparse.Namespace) -> RaySettings | None:
    """`--ray [ADDRESS]` and its companions (None without --ray). Ray itself is not imported here."""
    address = getattr(args, "ray", None)
    if address is None:
        return None
    return RaySettings(address=None if address == LOCAL_RAY else address, workers=getattr(args, "ray_workers", None),
                       shared_output=getattr(args, "ray_shared_output", False))


def _check_config(parser: argparse.ArgumentParser, config: ServerConfig) -> None:
    if not 0 <= config.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {config.port}")
    if config.max_upload_size_mb <= 0:
        parser.error(f"--max-upload-size must be positive (MB), got {config.max_upload_size_mb:g}")
    for flag, value in (("--header-timeout", config.header_timeout), ("--body-timeout", config.body_timeout),
                        ("--max-ws-message-size", config.max_ws_message_mb)):
        if not value > 0:
            parser.error(f"{flag} must be positive, got {value:g}")
    if config.max_connections_per_client < 0:
        parser.error(f"--max-connections-per-client must be >= 0, got {config.max_connections_per_client}")
    if not config.ws_heartbeat >= 0:
        parser.error(f"--ws-heartbeat must be >= 0 (0: never ping), got {config.ws_heartbeat:g}")
    if config.cache.kind == "lru" and config.cache.size < 0:
        parser.error(f"--cache-lru must be >= 0, got {config.cache.size}")
    if not config.listen:
        parser.error("--listen needs at least one address")
    for path in config.extra_model_paths:
        if not path.is_file():
            parser.error(f"--extra-model-paths-config: no such file: {path}")
    # ComfyUI serves plain HTTP when only one TLS file is given; say so instead of serving unencrypted.
    if (config.tls_keyfile is None) != (config.tls_certfile is None):
        parser.error("--tls-keyfile and --tls-certfile must be given together")
    for flag, path in (("--tls-keyfile", config.tls_keyfile), ("--tls-certfile", config.tls_certfile)):
        if path is not None and not path.is_file():
            parser.error(f"{flag}: no such file: {path}")
    if config.reserve_vram_gb is not None and config.reserve_vram_gb < 0:
        parser.error(f"--reserve-vram must be >= 0 (GB), got {config.reserve_vram_gb:g}")
    if config.default_device is not None and not 0 <= config.default_device < DEVICE_SLOTS:
        parser.error(f"--default-device must be between 0 and {DEVICE_SLOTS - 1}, got {config.default_device}")


# ComfyUI lists this many device ids when --default-device moves one to the front.
DEVICE_SLOTS = 32


def device_environment(config: ServerConfig) -> dict[str, str]:
    """The environment variables that choose this process's devices, as ComfyUI's main.py sets
    them; they must be set before torch is first imported."""
    variables: dict[str, str] = {}
    if config.default_device is not None:
        order = [config.default_device, *(i for i in range(DEVICE_SLOTS) if i != config.default_device)]
        variables["CUDA_VISIBLE_DEVICES"] = variables["HIP_VISIBLE_DEVICES"] = ",".join(map(str, order))
    if config.cuda_device is not None:
        for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
            variables[name] = str(config.cuda_device)
    if config.oneapi_device_selector is not None:
        variables["ONEAPI_DEVICE_SELECTOR"] = config.oneapi_device_selector
    return variables


def apply_process_flags(config: ServerConfig, environ: MutableMapping[str, str]) -> None:
    """Set what the process-level flags ask for in `environ` (main: `os.environ`), before torch
    loads: the visible devices, and cuBLAS's deterministic workspace for --deterministic."""
    if "torch" in sys.modules and (config.cuda_device is not None or config.default_device is not None):
        log.warning("torch was imported before the device flags were applied; they may not take effect")
    environ.update(device_environment(config))
    if config.deterministic:
        environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what cuBLAS needs to be deterministic


def log_handlers(*, use_stdout: bool, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> list[logging.Handler]:
    """Where log records go: stderr; with --log-stdout (ComfyUI's app/logger.py) records below
    ERROR go to stdout and only errors to stderr."""
    fmt = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    errors = logging.StreamHandler(stderr or sys.stderr)
    handlers: list[logging.Handler] = [errors]
    if use_stdout:
        errors.addFilter(lambda record: record.levelno >= logging.ERROR)
        normal = logging.StreamHandler(stdout or sys.stdout)
        normal.addFilter(lambda record: record.levelno < logging.ERROR)
        handlers.append(normal)
    for handler in handlers:
        handler.setFormatter(fmt)
    return handlers


def configure_logging(level: str, *, use_stdout: bool) -> None:
    """Root logging at `level` through `log_handlers`; like `logging.basicConfig`, handlers are
    added only when the root logger has none (a host that embeds main keeps its own)."""
    root = logging.getLogger()
    if not root.handlers:
        for handler in log_handlers(use_stdout=use_stdout):
            root.addHandler(handler)
    root.setLevel(getattr(logging, level))


def announce(config: ServerConfig, urls: list[str], started: float, *,
             open_browser: Callable[[str], object] | None = None, out: TextIO | None = None) -> None:
    """What the server says once it listens (nothing with --dont-print-server), and the browser
    it opens with --auto-launch (ComfyUI's call_on_start)."""
    out = out or sys.stdout
    if config.print_server:
        print(f"Started in {time.perf_counter() - started:.2f} s", file=out)
        print(f"To see the GUI go to: {config.url()}" if config.port else f"Listening on {', '.join(urls)}",
              file=out, flush=True)
    if config.auto_launch:
        url = config.url() if config.port else urls[0]
        (open_browser or _open_browser)(url)


def empty_model_hint(folders: "ModelFolders") -> str | None:
    """What to do when no checkpoint or diffusion model exists yet (the editor's loader would
    show "undefined"), or None."""
    if folders.filenames("checkpoints") or folders.filenames("diffusion_models"):
        return None
    where = folders.paths("checkpoints")[0]
    return (f"no checkpoints yet: put a .safetensors checkpoint in {where}, or make the tiny random demo one "
            f"with `.venv/bin/python -m tests.fixtures.checkpoints {where}` (its images are coloured noise)")


def _open_browser(url: str) -> None:
    import webbrowser

    webbrowser.open(url)


class RayStartError(RuntimeError):
    """--ray: Ray is not installed, or the cluster cannot be joined."""


def connect_ray(config: ServerConfig) -> None:
    """--ray: join the cluster before serving, on the main thread (web/ray_backend/cluster.py)."""
    try:
        from web.ray_backend import cluster
    except ImportError as exc:
        raise RayStartError(f"--ray needs Ray: pip install -r requirements-ray.txt ({exc})") from exc
    try:
        cluster.connect(config.ray)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayStartError(f"--ray: cannot join the Ray cluster at {config.ray.address or 'a new local instance'}: "
                            f"{exc}") from exc


def _keep_an_event_loop_set() -> None:
    """ComfyUI's main thread keeps its event loop set until the process exits, and packs' exit
    handlers call `asyncio.get_event_loop()` (comfyui-deploy's), which raises once `asyncio.run`
    has unset ours: leave a fresh one set for them."""
    asyncio.set_event_loop(asyncio.new_event_loop())


def serve(config: ServerConfig) -> int:
    from web.app import serve_forever
    from web.bootstrap import build_state

    from comfy_core.folders import ModelFolderError
    from web.store import StoreError

    started = time.perf_counter()
    try:
        # Packs import after the server listens when the last start's record of them still holds
        # (web/pack_start.py); not with --ray (workers import their own) or --quick-test-for-ci.
        state = build_state(config, defer_packs=config.ray is None and not config.quick_test_for_ci)
    except (ModelFolderError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if config.ray is not None and not config.quick_test_for_ci:
        try:
            connect_ray(config)
        except RayStartError as exc:
            state.store.close()
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if config.quick_test_for_ci:
        print(f"quick test: {len(state.registry)} node types, {len(state.packs)} packs loaded "
              f"in {time.perf_counter() - started:.2f} s")
        state.store.close()
        _keep_an_event_loop_set()
        return 0

    def ready(urls: list[str]) -> None:
        announce(config, urls, started)
        hint = empty_model_hint(state.env.folders)
        if hint:
            log.warning(hint)

    try:
        # warm_up: torch and the nodes' runtime load in the background once the server listens.
        # (Not with --ray: prompts run on the worker actors, which load their own runtime.)
        asyncio.run(serve_forever(state, on_ready=ready, stop_signals=(signal.SIGINT, signal.SIGTERM),
                                  warm_up=config.ray is None))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, the address is not this machine's, or TLS files are bad
        state.store.close()
        print(f"error: cannot listen on {', '.join(config.listen)} port {config.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    _keep_an_event_loop_set()
    if config.print_server:
        print("Stopped.", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":  # the default mode, by its name
        argv = argv[1:]
    if argv and argv[0] == "users":  # accounts of the --users mode (web/auth/cli.py, docs/auth.md)
        from web.auth.cli import main as users_main

        return users_main(argv[1:])
    if argv and argv[0] == "run":
        parser = build_run_parser()
        args = parser.parse_args(argv[1:])
    else:
        parser = build_serve_parser()
        args = parser.parse_args(argv)
    workers = getattr(args, "ray_workers", None)
    if workers is not None and (args.ray is None or workers < 1):  # before RaySettings refuses it
        parser.error(f"--ray-workers needs --ray and at least 1 worker, got {workers}")
    config = config_from_args(args, argv)
    _check_config(parser, config)
    configure_logging(args.verbose, use_stdout=config.log_stdout)
    ignored = flags_without_effect(args, parser)
    if ignored:
        log.warning("accepted, but no effect on this build: %s", " ".join(ignored))
    apply_process_flags(config, os.environ)
    if argv and argv[0] == "run":
        from web.headless import run_workflow_sync

        if config.deterministic:
            from web.warmup import use_deterministic_algorithms

            use_deterministic_algorithms()
        return run_workflow_sync(config, args.workflow, out=sys.stdout, err=sys.stderr)
    return serve(config)


def _leave(code: int) -> None:
    """`main.py run`'s exit: `code` once stdout, stderr and the logs are flushed, without the
    interpreter's teardown. After a long run a native library's static destructor sometimes aborts the
    process ("terminate called without an active exception", exit status 134, seen about one run in
    three with the Qwen-Image 2.1 template at 1024 px; the culprit is not found yet), which would turn a
    run that wrote its files into a failure; nothing of ours needs the teardown (every output file is
    closed by then)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    # As ComfyUI's main.py does when run (its `__main__` block, before prestartup scripts and
    # packs load), "for custom nodes": packs read them (ComfyUI-Lora-Manager takes
    # HF_HUB_DISABLE_TELEMETRY=1 to mean it runs inside ComfyUI, not standalone).
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["DO_NOT_TRACK"] = "1"
    status = main()
    if sys.argv[1:2] == ["run"]:
        _leave(status)
    sys.exit(status)
