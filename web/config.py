"""The server's settings, as parsed from the command line (see main.py), as one frozen object.

Nothing here reads `sys.argv` or the environment: main.py builds a `ServerConfig` from its flags
and tests build one directly, so every server in a process can have its own settings.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from graph.pack_isolation import DEFAULT_CALL_TIMEOUT, DEFAULT_IMPORT_TIMEOUT
from web.auth.settings import AuthSettings

DEFAULT_PORT = 8188
DEFAULT_MAX_UPLOAD_MB = 100.0
DEFAULT_PREVIEW_SIZE = 512
# ComfyUI's LatentPreviewMethod values; ComfyUI's default is "none" (no preview frames).
PREVIEW_METHODS = ("none", "auto", "latent2rgb", "taesd")
# The VRAM modes ComfyUI's flags name (comfy_core.memory_plan.VramMode values; web.flags parses them).
VRAM_MODES = ("gpu_only", "highvram", "normalvram", "lowvram", "novram")
# ComfyUI's MAXIMUM_HISTORY_SIZE: older entries are dropped first.
DEFAULT_MAX_HISTORY = 10000
# Connection limits (issue 34; docs/server.md, "Security"). ComfyUI has none of these.
DEFAULT_HEADER_TIMEOUT = 30.0  # s for a connection's request line and headers (and idle keep-alive)
DEFAULT_BODY_TIMEOUT = 60.0  # s the server waits for the next piece of a request body
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 256  # open connections from one client address (0: no cap)
DEFAULT_MAX_WS_MESSAGE_MB = 16.0  # one WebSocket message from a client (a queue_prompt, not an upload)
DEFAULT_WS_HEARTBEAT = 30.0  # s between pings to a WebSocket; no pong in half of it closes it (0: off)
DEFAULT_PACK_IMPORT_TIMEOUT = DEFAULT_IMPORT_TIMEOUT  # s for one custom-node pack's import (0: no limit)
DEFAULT_PACK_CALL_TIMEOUT = DEFAULT_CALL_TIMEOUT  # s for one INPUT_TYPES() of a pack's node (0: no limit)

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def is_loopback_host(host: str) -> bool:
    """True for `localhost`, `127.0.0.0/8`, `::1` (brackets and zone ids tolerated)."""
    name = host.strip().strip("[]").split("%", 1)[0].lower().rstrip(".")
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class CacheSettings:
    """Which executor cache to build (`graph.cache.CacheConfig` is made from this)."""

    kind: str = "classic"  # "classic" | "lru" | "none" | "ram"
    size: int = 0  # --cache-lru N
    ram_headroom_gb: float = 4.0  # --cache-ram [GB]


DTYPE_NAMES = ("fp32", "fp16", "bf16")


class DtypeSettingsError(ValueError):
    """Precision flags that contradict each other, or an unknown dtype name."""


@dataclass(frozen=True)
class DtypeSettings:
    """Weight dtype per component from ComfyUI's precision flags; None keeps the compute device's
    default (comfy_core.checkpoint.dtype). Names only, so start-up imports no torch."""

    unet: str | None = None  # --fp32-unet / --fp16-unet / --bf16-unet
    vae: str | None = None  # --fp32-vae / --fp16-vae / --bf16-vae
    text_enc: str | None = None  # --fp32-text-enc / --fp16-text-enc / --bf16-text-enc

    def __post_init__(self) -> None:
        for component in ("unet", "vae", "text_enc"):
            value = getattr(self, component)
            if value is not None and value not in DTYPE_NAMES:
                raise DtypeSettingsError(f"DtypeSettings.{component}: expected one of {DTYPE_NAMES} or None, "
                                         f"got {value!r}")

    @classmethod
    def from_flags(cls, *, force_fp16: bool = False, force_fp32: bool = False, unet: str | None = None,
                   vae: str | None = None, text_enc: str | None = None) -> "DtypeSettings":
        """ComfyUI's precedence (comfy/cli_args.py, comfy/model_management.py): a component's own
        flag wins; otherwise `--force-fp16` makes the UNet fp16 (ComfyUI sets `fp16_unet`) and
        `--force-fp32` makes every component fp32."""
        if force_fp16 and force_fp32:
            raise DtypeSettingsError("--force-fp16 and --force-fp32 cannot both be set")
        forced = "fp16" if force_fp16 else "fp32" if force_fp32 else None
        return cls(unet=unet or forced,
                   vae=vae or ("fp32" if force_fp32 else None),
                   text_enc=text_enc or ("fp32" if force_fp32 else None))

    def policy_names(self) -> dict[str, str]:
        """`{component: dtype name}` for the components set (keys `unet`, `vae`, `text`): what
        the host puts in `env.dtype_policy`; the loader nodes build comfy_core's DtypePolicy from
        it on first use."""
        pairs = (("unet", self.unet), ("vae", self.vae), ("text", self.text_enc))
        return {component: name for component, name in pairs if name is not None}


@dataclass(frozen=True)
class RaySettings:
    """`--ray`: prompts run on Ray worker actors (web/ray_backend/) instead of in this process."""

    address: str | None = None  # None: start a local Ray instance; "auto"; "ray://host:port"
    workers: int | None = None  # None: one per GPU in the cluster, else 1
    shared_output: bool = False  # workers use the server's input/output/temp folders as they are
    # Ray's own start-up options for a local instance (tests: num_cpus, _temp_dir).
    init_options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # "module:function" returning a graph.registry.Registry that workers use instead of the
    # built-ins + packs (the Ray twin of build_state's `registry=`, for embedders and tests).
    registry_factory: str | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"RaySettings.workers: expected at least 1, got {self.workers}")


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to know that is not code.

    `base_dir` roots the default `models/`, `output/`, `input/`, `temp/`, `user/` and
    `custom_nodes/` folders (ComfyUI's layout); the `*_dir` fields override single folders.
    """

    base_dir: Path = field(default_factory=Path.cwd)
    listen: tuple[str, ...] = ("127.0.0.1",)
    port: int = DEFAULT_PORT
    output_dir: Path | None = None
    input_dir: Path | None = None
    temp_dir: Path | None = None
    user_dir: Path | None = None
    extra_model_paths: tuple[Path, ...] = ()
    cpu: bool = False
    dtype: DtypeSettings = DtypeSettings()
    cache: CacheSettings = CacheSettings()
    disable_all_custom_nodes: bool = False
    whitelist_custom_nodes: tuple[str, ...] = ()
    custom_node_dirs: tuple[Path, ...] | None = None  # None: base_dir/custom_nodes + yaml entries
    # s a pack's import / one INPUT_TYPES() may take before it is abandoned (0: no limit, as ComfyUI;
    # graph/pack_isolation.py): --custom-node-import-timeout / --custom-node-call-timeout
    custom_node_import_timeout: float = DEFAULT_PACK_IMPORT_TIMEOUT
    custom_node_call_timeout: float = DEFAULT_PACK_CALL_TIMEOUT
    max_upload_size_mb: float = DEFAULT_MAX_UPLOAD_MB
    header_timeout: float = DEFAULT_HEADER_TIMEOUT  # --header-timeout
    body_timeout: float = DEFAULT_BODY_TIMEOUT  # --body-timeout
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT  # --max-connections-per-client
    max_ws_message_mb: float = DEFAULT_MAX_WS_MESSAGE_MB  # --max-ws-message-size
    ws_heartbeat: float = DEFAULT_WS_HEARTBEAT  # --ws-heartbeat
    cors_origin: str | None = None  # --enable-cors-header [ORIGIN]; None keeps the origin check
    preview_method: str = "none"  # one of PREVIEW_METHODS, passed to the environment unchanged
    preview_size: int = DEFAULT_PREVIEW_SIZE
    max_history: int = DEFAULT_MAX_HISTORY
    verbose: bool = False
    quick_test_for_ci: bool = False
    argv: tuple[str, ...] = ()
    tls_keyfile: Path | None = None  # --tls-keyfile / --tls-certfile: both set -> HTTPS
    tls_certfile: Path | None = None
    front_end_root: Path | None = None  # --front-end-root: an editor build served instead of the package
    disable_metadata: bool = False  # --disable-metadata: no workflow text chunks in saved files
    attention_backend: str | None = None  # the models' default backend (None: sdpa); attention flags
    vae_attention_backend: str | None = None
    mmap: bool = True  # False: --disable-mmap
    reserve_vram_gb: float | None = None  # --reserve-vram
    vram_mode: str | None = None  # --gpu-only / --highvram / --normalvram / --lowvram / --novram (web.flags.VRAM_MODES)
    deterministic: bool = False  # --deterministic
    cuda_device: int | None = None  # --cuda-device / --default-device / --oneapi-device-selector:
    default_device: int | None = None  # the devices this process sees (main.py sets the variables)
    oneapi_device_selector: str | None = None
    auto_launch: bool = False  # --auto-launch / --windows-standalone-build, unless --disable-auto-launch
    print_server: bool = True  # False: --dont-print-server
    log_stdout: bool = False  # --log-stdout
    compress_response_body: bool = False  # --enable-compress-response-body
    ray: RaySettings | None = None  # --ray [ADDRESS]: None runs prompts in this process
    enable_assets: bool = False  # --enable-assets: the assets API (web/routes_assets.py)
    enable_asset_hashing: bool = False  # --enable-asset-hashing: the folder scan hashes files; from-hash works
    auth: AuthSettings | None = None  # --users: logins, roles, per-user isolation (web/auth/; docs/auth.md)
    multi_user: bool = False  # --multi-user: ComfyUI's Comfy-User header picks the user/ folder (NOT authentication)
    # Every flag under ComfyUI's attribute names as main.py parsed it (web.flags.comfy_namespace),
    # for `comfy.cli_args.args`; empty for a config built in code.
    comfy_flags: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.vram_mode is not None and self.vram_mode not in VRAM_MODES:
            raise ValueError(f"ServerConfig.vram_mode: expected one of {VRAM_MODES} or None, got {self.vram_mode!r}")
        if self.preview_method not in PREVIEW_METHODS:
            raise ValueError(f"ServerConfig.preview_method: expected one of {PREVIEW_METHODS}, "
                             f"got {self.preview_method!r}")
        for name in ("custom_node_import_timeout", "custom_node_call_timeout"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"ServerConfig.{name}: expected seconds >= 0 (0: no limit), "
                                 f"got {getattr(self, name)!r}")

    @property
    def tls(self) -> bool:
        """HTTPS: both TLS files were given (ComfyUI needs both too)."""
        return self.tls_keyfile is not None and self.tls_certfile is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_size_mb * 1024 * 1024)

    @property
    def max_ws_message_bytes(self) -> int:
        return int(self.max_ws_message_mb * 1024 * 1024)

    @property
    def loopback_only(self) -> bool:
        """The server listens on loopback addresses only (the default)."""
        return all(is_loopback_host(h) for h in self.listen)

    def url(self) -> str:
        """The address to print at start-up (the first listen address; all-interfaces -> 127.0.0.1)."""
        host = self.listen[0] if self.listen else "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"
