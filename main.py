"""Command line: `python main.py [FLAGS]` serves (http://127.0.0.1:8188 by default);
`python main.py run WORKFLOW.json [FLAGS]` runs one API-format workflow without a server.

The flags are ComfyUI's, with the same names and meaning (see docs/dev/README-server.md).
An unknown flag is an error (exit status 2) that names the flag.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

from web.config import (DEFAULT_MAX_UPLOAD_MB, DEFAULT_PORT, DEFAULT_PREVIEW_SIZE, CacheSettings, DtypeSettings,
                        ServerConfig)

ALL_INTERFACES = "0.0.0.0,::"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _add_common_flags(parser: argparse.ArgumentParser) -> None:
    paths = parser.add_argument_group("folders")
    paths.add_argument("--base-directory", type=Path, default=None, metavar="DIR",
                       help="root of models/, output/, input/, temp/, user/, custom_nodes/ (default: this folder)")
    paths.add_argument("--output-directory", type=Path, default=None, metavar="DIR")
    paths.add_argument("--input-directory", type=Path, default=None, metavar="DIR")
    paths.add_argument("--temp-directory", type=Path, default=None, metavar="DIR",
                       help="parent of the temp folder (ComfyUI's meaning: DIR/temp is used)")
    paths.add_argument("--user-directory", type=Path, default=None, metavar="DIR")
    paths.add_argument("--extra-model-paths-config", type=Path, nargs="+", action="append", default=None,
                       metavar="PATH", help="ComfyUI-format extra_model_paths.yaml (repeatable)")

    compute = parser.add_argument_group("execution")
    compute.add_argument("--cpu", action="store_true", help="run everything on the CPU")
    cache = compute.add_mutually_exclusive_group()
    cache.add_argument("--cache-classic", action="store_true", help="keep the last prompt's outputs (default)")
    cache.add_argument("--cache-lru", type=int, default=0, metavar="N", help="keep up to N node results")
    cache.add_argument("--cache-none", action="store_true", help="no caching across prompts (least RAM)")
    cache.add_argument("--cache-ram", type=float, nargs="?", const=4.0, default=None, metavar="GB",
                       help="cache, evicting when free RAM drops under GB (default 4)")
    compute.add_argument("--preview-method", choices=("none", "auto", "latent2rgb"), default="latent2rgb",
                         help="live previews while sampling ('auto' = latent2rgb)")
    compute.add_argument("--preview-size", type=int, default=DEFAULT_PREVIEW_SIZE, metavar="PX")
    _add_precision_flags(parser)

    packs = parser.add_argument_group("custom nodes")
    packs.add_argument("--disable-all-custom-nodes", action="store_true")
    packs.add_argument("--whitelist-custom-nodes", nargs="+", default=[], metavar="PACK",
                       help="with --disable-all-custom-nodes: the packs that still load")

    parser.add_argument("--verbose", nargs="?", const="DEBUG", default="INFO", choices=LOG_LEVELS, metavar="LEVEL",
                        help="log level (bare: DEBUG)")


def _add_precision_flags(parser: argparse.ArgumentParser) -> None:
    """ComfyUI's weight-precision flags, in its mutually exclusive groups (comfy/cli_args.py);
    the fp8/fp64 variants are not supported here (an unknown flag)."""
    precision = parser.add_argument_group("precision", "weight dtypes (default: the compute device's)")
    forced = precision.add_mutually_exclusive_group()
    forced.add_argument("--force-fp32", action="store_true", help="every component in fp32")
    forced.add_argument("--force-fp16", action="store_true", help="the diffusion model in fp16")
    for component, dest, label in (("unet", "unet_dtype", "the diffusion model (UNet)"),
                                   ("vae", "vae_dtype", "the VAE"),
                                   ("text-enc", "text_enc_dtype", "the text encoders")):
        group = precision.add_mutually_exclusive_group()
        for name in ("fp32", "fp16", "bf16"):
            group.add_argument(f"--{name}-{component}", dest=dest, action="store_const", const=name, default=None,
                               help=f"{label} in {name}")


def build_serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="main.py", description="Serve the node-graph engine (ComfyUI-compatible API and editor). "
                                    "'main.py run WORKFLOW.json' runs a workflow without a server.",
        allow_abbrev=False)
    net = parser.add_argument_group("network")
    net.add_argument("--listen", nargs="?", const=ALL_INTERFACES, default="127.0.0.1", metavar="IP",
                     help="address(es) to listen on, comma-separated (bare: all interfaces)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT)
    net.add_argument("--max-upload-size", type=float, default=DEFAULT_MAX_UPLOAD_MB, metavar="MB")
    net.add_argument("--enable-cors-header", nargs="?", const="*", default=None, metavar="ORIGIN",
                     help="allow cross-origin requests from ORIGIN (bare: any); turns off the origin check")
    parser.add_argument("--quick-test-for-ci", action="store_true", help="load everything, then exit")
    _add_common_flags(parser)
    return parser


def build_run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="main.py run", description="Run one API-format workflow and exit.",
                                     allow_abbrev=False)
    parser.add_argument("workflow", type=Path, help="API-format workflow JSON ('Export (API)' in the editor)")
    _add_common_flags(parser)
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
        dtype=DtypeSettings.from_flags(force_fp16=args.force_fp16, force_fp32=args.force_fp32, unet=args.unet_dtype,
                                       vae=args.vae_dtype, text_enc=args.text_enc_dtype),
        cache=cache,
        disable_all_custom_nodes=args.disable_all_custom_nodes,
        whitelist_custom_nodes=tuple(args.whitelist_custom_nodes),
        max_upload_size_mb=getattr(args, "max_upload_size", DEFAULT_MAX_UPLOAD_MB),
        cors_origin=getattr(args, "enable_cors_header", None),
        preview_method="latent2rgb" if args.preview_method == "auto" else args.preview_method,
        preview_size=args.preview_size,
        verbose=args.verbose == "DEBUG",
        quick_test_for_ci=getattr(args, "quick_test_for_ci", False),
        argv=("main.py", *argv),
    )


def _check_config(parser: argparse.ArgumentParser, config: ServerConfig) -> None:
    if not 0 <= config.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {config.port}")
    if config.max_upload_size_mb <= 0:
        parser.error(f"--max-upload-size must be positive (MB), got {config.max_upload_size_mb:g}")
    if config.cache.kind == "lru" and config.cache.size < 0:
        parser.error(f"--cache-lru must be >= 0, got {config.cache.size}")
    if not config.listen:
        parser.error("--listen needs at least one address")
    for path in config.extra_model_paths:
        if not path.is_file():
            parser.error(f"--extra-model-paths-config: no such file: {path}")


def serve(config: ServerConfig) -> int:
    from web.app import serve_forever
    from web.bootstrap import build_state

    from comfy_core.folders import ModelFolderError
    from web.store import StoreError

    started = time.perf_counter()
    try:
        state = build_state(config)
    except (ModelFolderError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if config.quick_test_for_ci:
        print(f"quick test: {len(state.registry)} node types, {len(state.packs)} packs loaded "
              f"in {time.perf_counter() - started:.2f} s")
        state.store.close()
        return 0

    def ready(urls: list[str]) -> None:
        print(f"Started in {time.perf_counter() - started:.2f} s")
        print(f"To see the GUI go to: {config.url()}" if config.port else f"Listening on {', '.join(urls)}",
              flush=True)

    try:
        # warm_up: torch and the nodes' runtime load in the background once the server listens.
        asyncio.run(serve_forever(state, on_ready=ready, stop_signals=(signal.SIGINT, signal.SIGTERM), warm_up=True))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, or the address is not this machine's
        state.store.close()
        print(f"error: cannot listen on {', '.join(config.listen)} port {config.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print("Stopped.", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        parser = build_run_parser()
        args = parser.parse_args(argv[1:])
    else:
        parser = build_serve_parser()
        args = parser.parse_args(argv)
    config = config_from_args(args, argv)
    _check_config(parser, config)
    logging.basicConfig(level=getattr(logging, args.verbose), format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "run":
        from web.headless import run_workflow_sync

        return run_workflow_sync(config, args.workflow, out=sys.stdout, err=sys.stderr)
    return serve(config)


if __name__ == "__main__":
    sys.exit(main())
