"""The ComfyUI version this server reports: `comfyui_version.__version__` for packs and
`/system_stats`'s `system.comfyui_version` for the editor (web/routes_info.py). One constant.

Why today's release and not 0.3.64 (the snapshot measured side by side): the contract is today's
ComfyUI (DESIGN.md), and every reader of this string compares it with today's releases.
The pinned editor (comfyui-frontend-package 1.58.1) uses it to decide whether the registry's
packs fit this server (their `supported_comfyui_version` ranges, which 2026 packs set to 0.4 or
later), to group the core nodes a workflow lacks by the ComfyUI version that added them, and to
offer "a new ComfyUI is available" against the release list; packs gate the 2026 API
(`io.Autogrow`, `ComfyAPI().node_replacement`, ...) on it. Reporting 0.3.64 would flag
2026 packs as incompatible and tell users to update a server that already speaks that API.
The value is the newest ComfyUI release the reference map follows
(/work/shared/reference/comfyui-2026.md §1.1: v0.47.1 of 2026-12-02).
"""
from __future__ import annotations

COMFYUI_VERSION = "0.47.1"
