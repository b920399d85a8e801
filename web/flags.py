"""ComfyUI 0.3.64's command-line flags, with its spellings, value shapes, groups and defaults
(after ComfyUI's comfy/cli_args.py), plus ours (`--cache-ram`).

Every flag ComfyUI accepts is accepted here, so existing launch scripts and Docker images keep
working. The parsed namespace uses ComfyUI's attribute names; `comfy_namespace()` applies
ComfyUI's post-processing (`--windows-standalone-build` turns on `auto_launch`,
`--disable-auto-launch` turns it off, `--force-fp16` sets `fp16_unet`, `--fast` becomes a set),
so `comfy.cli_args.args` (compat/cli_args.py) can answer exactly what ComfyUI's would.

Flags that change nothing on this build are listed in `NO_EFFECT`; `flags_without_effect()`
names the ones given on a command line, for main.py's single log line. This module only builds
parsers: nothing here reads `sys.argv` or the environment.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Mapping

# ComfyUI's `--fast` options: the enum packs import from comfy.cli_args, so `--fast` parses into it.
from compat.cli_args import PerformanceFeature
from compat.feature_flags import FeatureFlagError, parse_feature_flag
from web.auth.settings import DEFAULT_PROMPTS_PER_MINUTE, DEFAULT_QUEUE_QUOTA
from web.config import (DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
                        DEFAULT_MAX_UPLOAD_MB, DEFAULT_MAX_WS_MESSAGE_MB, DEFAULT_PACK_CALL_TIMEOUT,
                        DEFAULT_PACK_IMPORT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREVIEW_SIZE,
                        DEFAULT_WS_HEARTBEAT, PREVIEW_METHODS, VRAM_MODES)

ALL_INTERFACES = "0.0.0.0,::"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
HASHING_FUNCTIONS = ("md5", "sha1", "sha256", "sha512")
# ComfyUI's DEFAULT_VERSION_STRING: the frontend it would download; we serve the pinned package.
DEFAULT_FRONT_END_VERSION = "comfyanonymous/ComfyUI@latest"
DEFAULT_COMFY_API_BASE = "https://api.comfy.org"


# dest -> the flag as written, for every flag that is accepted but changes nothing here.
NO_EFFECT: Mapping[str, str] = {
    "cuda_malloc": "--cuda-malloc",
    "disable_cuda_malloc": "--disable-cuda-malloc",
    "fp64_unet": "--fp64-unet", "fp8_e4m3fn_unet": "--fp8_e4m3fn-unet", "fp8_e5m2_unet": "--fp8_e5m2-unet",
    "fp8_e8m0fnu_unet": "--fp8_e8m0fnu-unet", "cpu_vae": "--cpu-vae",
    "fp8_e4m3fn_text_enc": "--fp8_e4m3fn-text-enc", "fp8_e5m2_text_enc": "--fp8_e5m2-text-enc",
    "force_channels_last": "--force-channels-last", "directml": "--directml",
    "disable_ipex_optimize": "--disable-ipex-optimize", "supports_fp8_compute": "--supports-fp8-compute",
    "use_sage_attention": "--use-sage-attention", "use_flash_attention": "--use-flash-attention",
    "disable_xformers": "--disable-xformers",  # our default is never xformers (it is sdpa)
    "force_upcast_attention": "--force-upcast-attention", "dont_upcast_attention": "--dont-upcast-attention",
    "async_offload": "--async-offload", "force_non_blocking": "--force-non-blocking",
    "disable_smart_memory": "--disable-smart-memory", "fast": "--fast",
    "mmap_torch_files": "--mmap-torch-files", "disable_api_nodes": "--disable-api-nodes",
    "front_end_version": "--front-end-version",
    "comfy_api_base": "--comfy-api-base", "database_url": "--database-url",
    "default_hashing_function": "--default-hashing-function",
}
# Ours (not ComfyUI's): web/ray_backend/. Left out of `comfy.cli_args.args` (comfy_namespace).
RAY_DESTS = ("ray", "ray_workers", "ray_shared_output")
LOCAL_RAY = "local"  # `--ray` without an address: start a Ray instance in this process
# Ours (not ComfyUI's): the connection limits (web/connections.py). Left out of `comfy.cli_args.args`.
# Ours (not ComfyUI's): how long a pack's import / INPUT_TYPES() may take (graph/pack_isolation.py).
PACK_LIMIT_DESTS = ("custom_node_import_timeout", "custom_node_call_timeout")
CONNECTION_DESTS = ("header_timeout", "body_timeout", "max_connections_per_client", "max_ws_message_size",
                    "ws_heartbeat")
# Ours (not ComfyUI's): the users mode (web/auth/, docs/auth.md). Left out of `comfy.cli_args.args`.
AUTH_DESTS = ("users", "user_prompt_rate", "user_queue_quota")
# Flags only the server takes (`main.py run WORKFLOW` refuses them: it opens no port).
SERVER_ONLY = frozenset({
    "listen", "port", "tls_keyfile", "tls_certfile", "enable_cors_header", "max_upload_size", "auto_launch",
    "disable_auto_launch", "windows_standalone_build", "dont_print_server", "quick_test_for_ci", "multi_user",
    "front_end_version", "front_end_root", "enable_compress_response_body", "feature_flag", "enable_assets", "disable_assets",
    "enable_asset_hashing", *RAY_DESTS, *CONNECTION_DESTS, *AUTH_DESTS})


def existing_directory(value: str) -> Path:
    """ComfyUI's `is_valid_directory`: the path must be a readable folder."""
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"the path '{value}' does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"'{value}' is not a directory")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"no read permission for '{value}'")
    return path


def non_negative_int(value: str) -> int:
    """An integer >= 0 (the --users limits; 0 turns one off)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {number}")
    return number


def feature_flag_item(value: str) -> str:
    """ComfyUI's `--feature-flag KEY[=VALUE]`, kept as written (ComfyUI's `args.feature_flag`);
    a known flag whose value does not fit its type is refused here (compat/feature_flags.py)."""
    try:
        parse_feature_flag(value)
    except FeatureFlagError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _store_true(group: Any, *names: str, help: str | None = None) -> None:
    for name in names:
        group.add_argument(name, action="store_true", help=help)


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """Network, browser and editor flags (serve only)."""
    net = parser.add_argument_group("network")
    net.add_argument("--listen", nargs="?", const=ALL_INTERFACES, default="127.0.0.1", metavar="IP",
                     help="address(es) to listen on, comma-separated (bare: all interfaces)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT)
    net.add_argument("--tls-keyfile", type=str, default=None, metavar="PATH",
                     help="TLS key file: serve HTTPS (needs --tls-certfile)")
    net.add_argument("--tls-certfile", type=str, default=None, metavar="PATH",
                     help="TLS certificate file: serve HTTPS (needs --tls-keyfile)")
    net.add_argument("--enable-cors-header", nargs="?", const="*", default=None, metavar="ORIGIN",
                     help="allow cross-origin requests from ORIGIN (bare: any); turns off the origin check")
    net.add_argument("--max-upload-size", type=float, default=DEFAULT_MAX_UPLOAD_MB, metavar="MB")
    net.add_argument("--enable-compress-response-body", action="store_true",
                     help="gzip JSON and text responses for clients that accept it")
    net.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT, metavar="SECONDS",
                     help="close a connection that has not sent a complete request head in this time "
                          "(also how long an idle keep-alive connection stays open)")
    net.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT, metavar="SECONDS",
                     help="close a connection whose request body stops arriving for this long")
    net.add_argument("--max-connections-per-client", type=int, default=DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
                     metavar="N", help="open connections allowed from one client address; more are answered "
                                       "503 and closed (0: no cap)")
    net.add_argument("--max-ws-message-size", type=float, default=DEFAULT_MAX_WS_MESSAGE_MB, metavar="MB",
                     help="largest WebSocket message a client may send (a larger one closes the socket)")
    net.add_argument("--ws-heartbeat", type=float, default=DEFAULT_WS_HEARTBEAT, metavar="SECONDS",
                     help="ping each WebSocket this often; one that does not answer within half of it "
                          "is closed (0: never ping)")
    ui = parser.add_argument_group("browser and editor")
    ui.add_argument("--auto-launch", action="store_true", help="open the editor in the default browser")
    ui.add_argument("--disable-auto-launch", action="store_true", help="never open a browser")
    ui.add_argument("--windows-standalone-build", action="store_true", help="ComfyUI's portable build: auto-launch")
    ui.add_argument("--dont-print-server", action="store_true", help="do not print the server's address")
    ui.add_argument("--multi-user", action="store_true",
                    help="ComfyUI's per-user folders picked by the Comfy-User header (not authentication: "
                         "see --users)")
    ui.add_argument("--front-end-version", type=str, default=DEFAULT_FRONT_END_VERSION, metavar="OWNER/REPO@VERSION",
                    help="accepted; the pinned editor package is served (no downloads)")
    ui.add_argument("--front-end-root", type=existing_directory, default=None, metavar="DIR",
                    help="serve the editor build in DIR instead of the pinned package")
    ui.add_argument("--feature-flag", type=feature_flag_item, action="append", default=[], metavar="KEY[=VALUE]",
                    help="a flag the editor reads from /features (bare KEY: true; repeatable; "
                         "compat/feature_flags.py lists the known ones)")
    assets = parser.add_argument_group("assets", "the assets API (/api/assets, /api/tags; web/routes_assets.py)")
    assets.add_argument("--enable-assets", action="store_true",
                        help="serve the assets API and catalogue input/, output/ and the model folders")
    assets.add_argument("--enable-asset-hashing", action="store_true",
                        help="the folder scan hashes files with blake3 (uploads are hashed either way); "
                             "needed by POST /api/assets/from-hash")
    assets.add_argument("--disable-assets", action="store_true",
                        help="no assets API, whatever --enable-assets says (today's ComfyUI's switch for when "
                             "assets are on by default)")
    users = parser.add_argument_group("users", "logins, roles and per-user isolation (not in ComfyUI; docs/auth.md)")
    users.add_argument("--users", action="store_true",
                       help="require a login (editor: password; scripts: 'Authorization: Bearer' tokens); users "
                            "and roles live in the server's database: create the first admin with "
                            "`main.py users add NAME --role admin`")
    users.add_argument("--user-prompt-rate", type=non_negative_int, default=DEFAULT_PROMPTS_PER_MINUTE, metavar="N",
                       help="with --users: prompts one user may submit per minute (more: 429; 0: no limit)")
    users.add_argument("--user-queue-quota", type=non_negative_int, default=DEFAULT_QUEUE_QUOTA, metavar="N",
                       help="with --users: pending prompts one user may have queued (more: 429; 0: no limit)")
    parser.add_argument("--quick-test-for-ci", action="store_true", help="load everything, then exit")




def add_ray_flags(parser: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]`, `--ray-workers N`, `--ray-shared-output` (serve only)."""
    ray = parser.add_argument_group("ray", "run prompts on Ray worker actors (needs `pip install .[ray]`)")
    ray.add_argument("--ray", nargs="?", const=LOCAL_RAY, default=None, metavar="ADDRESS",
                     help="run prompts on a Ray cluster: 'auto', ray://HOST:PORT, or bare to start one here")
    ray.add_argument("--ray-workers", type=int, default=None, metavar="N",
                     help="worker actors (default: one per GPU in the cluster, else 1)")
    ray.add_argument("--ray-shared-output", action="store_true",
                     help="workers use the server's input/output/temp folders (a shared file system) "
                          "instead of sending files through the server")


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag both `main.py` and `main.py run` take."""
    paths = parser.add_argument_group("folders")
    paths.add_argument("--base-directory", type=Path, default=None, metavar="DIR",
                       help="root of models/, output/, input/, temp/, user/, custom_nodes/ (default: this folder)")
    paths.add_argument("--extra-model-paths-config", type=Path, nargs="+", action="append", default=None,
                       metavar="PATH", help="ComfyUI-format extra_model_paths.yaml (repeatable)")
    paths.add_argument("--output-directory", type=Path, default=None, metavar="DIR")
    paths.add_argument("--temp-directory", type=Path, default=None, metavar="DIR",
                       help="parent of the temp folder (ComfyUI's meaning: DIR/temp is used)")
    paths.add_argument("--input-directory", type=Path, default=None, metavar="DIR")
    paths.add_argument("--user-directory", type=Path, default=None, metavar="DIR")

    devices = parser.add_argument_group("devices")
    devices.add_argument("--cuda-device", type=int, default=None, metavar="DEVICE_ID",
                         help="the only CUDA device this process sees (CUDA_VISIBLE_DEVICES)")
    devices.add_argument("--default-device", type=int, default=None, metavar="DEFAULT_DEVICE_ID")
    malloc = devices.add_mutually_exclusive_group()
    _store_true(malloc, "--cuda-malloc", "--disable-cuda-malloc")
    devices.add_argument("--directml", type=int, nargs="?", const=-1, default=None, metavar="DIRECTML_DEVICE")
    devices.add_argument("--oneapi-device-selector", type=str, default=None, metavar="SELECTOR_STRING",
                         help="the oneAPI devices this process sees (ONEAPI_DEVICE_SELECTOR)")
    _store_true(devices, "--force-channels-last", "--disable-ipex-optimize", "--supports-fp8-compute")

    _add_precision_flags(parser)
    _add_attention_flags(parser)

    memory = parser.add_argument_group("memory")
    vram = memory.add_mutually_exclusive_group()
    _store_true(vram, "--gpu-only", "--highvram", "--normalvram", "--lowvram", "--novram")
    vram.add_argument("--cpu", action="store_true", help="run everything on the CPU")
    memory.add_argument("--reserve-vram", type=float, default=None, metavar="GB",
                        help="GPU memory kept free for other software and activations")
    _store_true(memory, "--async-offload", "--force-non-blocking", "--disable-smart-memory")
    memory.add_argument("--mmap-torch-files", action="store_true")
    memory.add_argument("--disable-mmap", action="store_true", help="copy safetensors weights into memory")

    compute = parser.add_argument_group("execution")
    compute.add_argument("--preview-method", choices=PREVIEW_METHODS, default="none",
                         help="live previews while sampling (default: none, as ComfyUI)")
    compute.add_argument("--preview-size", type=int, default=DEFAULT_PREVIEW_SIZE, metavar="PX")
    cache = compute.add_mutually_exclusive_group()
    cache.add_argument("--cache-classic", action="store_true", help="keep the last prompt's outputs (default)")
    cache.add_argument("--cache-lru", type=int, default=0, metavar="N", help="keep up to N node results")
    cache.add_argument("--cache-none", action="store_true", help="no caching across prompts (least RAM)")
    cache.add_argument("--cache-ram", type=float, nargs="?", const=4.0, default=None, metavar="GB",
                       help="cache, evicting when free RAM drops under GB (default 4; not in ComfyUI 0.3.64)")
    compute.add_argument("--default-hashing-function", choices=HASHING_FUNCTIONS, default="sha256")
    compute.add_argument("--deterministic", action="store_true",
                         help="make torch use deterministic algorithms where it can")
    compute.add_argument("--fast", nargs="*", type=PerformanceFeature, default=None, metavar="FEATURE",
                         help=f"accepted; no effect here ({' '.join(f.value for f in PerformanceFeature)})")
    compute.add_argument("--disable-metadata", action="store_true", help="write no workflow text chunks into PNGs")

    packs = parser.add_argument_group("custom nodes")
    packs.add_argument("--disable-all-custom-nodes", action="store_true")
    packs.add_argument("--whitelist-custom-nodes", nargs="+", default=[], metavar="PACK",
                       help="with --disable-all-custom-nodes: the packs that still load")
    packs.add_argument("--custom-node-import-timeout", type=float, default=DEFAULT_PACK_IMPORT_TIMEOUT,
                       metavar="SECONDS", help="a pack's import that takes longer is abandoned and the pack reported "
                       "as failed (0: wait as long as it takes, as ComfyUI; not in ComfyUI)")
    packs.add_argument("--custom-node-call-timeout", type=float, default=DEFAULT_PACK_CALL_TIMEOUT,
                       metavar="SECONDS", help="a node's INPUT_TYPES() that takes longer is abandoned and the node "
                       "left out (0: no limit; not in ComfyUI)")
    packs.add_argument("--disable-api-nodes", action="store_true", help="accepted; there are no API nodes here")
    packs.add_argument("--comfy-api-base", type=str, default=DEFAULT_COMFY_API_BASE, metavar="URL")
    packs.add_argument("--database-url", type=str, default=None, metavar="URL",
                       help="accepted; the queue lives in user/comfy_engine_queue.sqlite3")

    parser.add_argument("--verbose", nargs="?", const="DEBUG", default="INFO", choices=LOG_LEVELS, metavar="LEVEL",
                        help="log level (bare: DEBUG)")
    parser.add_argument("--log-stdout", action="store_true", help="log to stdout (errors stay on stderr)")


def _add_precision_flags(parser: argparse.ArgumentParser) -> None:
    """ComfyUI's weight-precision flags in its mutually exclusive groups. fp32/fp16/bf16 act; the
    fp8 and fp64 variants are accepted without effect."""
    precision = parser.add_argument_group("precision", "weight dtypes (default: the compute device's)")
    forced = precision.add_mutually_exclusive_group()
    forced.add_argument("--force-fp32", action="store_true", help="every component in fp32")
    forced.add_argument("--force-fp16", action="store_true", help="the diffusion model in fp16")
    unet = precision.add_mutually_exclusive_group()
    _store_true(unet, "--fp32-unet", "--fp64-unet", "--bf16-unet", "--fp16-unet", "--fp8_e4m3fn-unet",
                "--fp8_e5m2-unet", "--fp8_e8m0fnu-unet")
    vae = precision.add_mutually_exclusive_group()
    _store_true(vae, "--fp16-vae", "--fp32-vae", "--bf16-vae")
    precision.add_argument("--cpu-vae", action="store_true")
    text = precision.add_mutually_exclusive_group()
    _store_true(text, "--fp8_e4m3fn-text-enc", "--fp8_e5m2-text-enc", "--fp16-text-enc", "--fp32-text-enc",
                "--bf16-text-enc")


def _add_attention_flags(parser: argparse.ArgumentParser) -> None:
    attention = parser.add_argument_group("attention", "the default attention backend of loaded models")
    choice = attention.add_mutually_exclusive_group()
    choice.add_argument("--use-split-cross-attention", action="store_true", help="split (sliced) attention")
    choice.add_argument("--use-quad-cross-attention", action="store_true", help="sub-quadratic chunked attention")
    choice.add_argument("--use-pytorch-cross-attention", action="store_true",
                        help="torch scaled_dot_product_attention (the default here)")
    _store_true(choice, "--use-sage-attention", "--use-flash-attention")
    attention.add_argument("--disable-xformers", action="store_true")
    upcast = attention.add_mutually_exclusive_group()
    _store_true(upcast, "--force-upcast-attention", "--dont-upcast-attention")


def vram_mode(args: argparse.Namespace) -> str | None:
    """The VRAM mode flag given (`--gpu-only`, `--highvram`, `--normalvram`, `--lowvram`,
    `--novram`; argparse makes them exclusive), or None for the device's default."""
    for name in VRAM_MODES:
        if getattr(args, name, False):
            return name
    return None


def component_dtype(args: argparse.Namespace, component: str) -> str | None:
    """The fp32/fp16/bf16 flag given for `component` ("unet", "vae", "text_enc"), or None."""
    for name in ("fp32", "fp16", "bf16"):
        if getattr(args, f"{name}_{component}", False):
            return name
    return None


def attention_backends(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """`(model backend, VAE backend)` the attention flags choose, None for the default (sdpa).

    After ComfyUI's comfy/ldm/modules/attention.py and diffusionmodules/model.py: split and
    sub-quadratic attention are its fallbacks when PyTorch attention is off, and its VAE then
    uses split attention for both; `--use-pytorch-cross-attention` is our default anyway."""
    if getattr(args, "use_split_cross_attention", False):
        return "split", "split"
    if getattr(args, "use_quad_cross_attention", False):
        return "sub_quadratic", "split"
    return None, None


def comfy_namespace(args: argparse.Namespace) -> dict[str, Any]:
    """`args` as ComfyUI's `comfy.cli_args.args` would hold them: every ComfyUI attribute, with its
    post-processing (comfy/cli_args.py, end of file). Paths are strings, as ComfyUI's are."""
    values = dict(vars(args))
    for name in ("base_directory", "output_directory", "temp_directory", "input_directory", "user_directory",
                 "front_end_root"):
        if values.get(name) is not None:
            values[name] = str(values[name])
    if values.get("extra_model_paths_config") is not None:
        values["extra_model_paths_config"] = [[str(p) for p in group] for group in values["extra_model_paths_config"]]
    values.setdefault("auto_launch", False)
    if values.get("windows_standalone_build"):
        values["auto_launch"] = True
    if values.get("disable_auto_launch"):
        values["auto_launch"] = False
    if values.get("force_fp16"):
        values["fp16_unet"] = True
    fast = values.get("fast")
    values["fast"] = set() if fast is None else set(PerformanceFeature) if fast == [] else set(fast)
    values.pop("workflow", None)
    for name in (*RAY_DESTS, *CONNECTION_DESTS, *PACK_LIMIT_DESTS, *AUTH_DESTS):
        values.pop(name, None)
    return values


def flags_without_effect(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The flags given in `args` (a value other than the default) that change nothing here."""
    given = []
    for dest, flag in NO_EFFECT.items():
        if not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value != parser.get_default(dest):
            given.append(flag)
    return given


def comfy_defaults() -> dict[str, Any]:
    """ComfyUI's `args` for an empty command line (every flag at its default), as a new dict."""
    parser = argparse.ArgumentParser(add_help=False)
    add_server_flags(parser)
    add_common_flags(parser)
    return comfy_namespace(parser.parse_args([]))
