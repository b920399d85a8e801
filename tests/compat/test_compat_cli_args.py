"""`comfy.cli_args.args` as a pack sees it, at import time and inside a node, on a server started
from main.py's command line: every ComfyUI flag under its attribute name, with what was given."""
from __future__ import annotations

import textwrap

import aiohttp

import main
from tests.web.web_harness import TestServer, collect_until_done, ws_connect
from web.app import start_server
from web.bootstrap import build_state

ARGV = ["--port", "0", "--fp16-unet", "--bf16-vae", "--fp32-text-enc", "--use-split-cross-attention",
        "--disable-metadata", "--lowvram", "--fast", "fp16_accumulation", "--preview-method", "taesd",
        "--reserve-vram", "1.5", "--multi-user", "--windows-standalone-build", "--dont-print-server",
        "--cache-lru", "7", "--default-hashing-function", "sha512"]
# ComfyUI's attribute names the pack reads (what ComfyUI's args would hold for ARGV is below).
READ = ["fp16_unet", "bf16_unet", "bf16_vae", "fp32_text_enc", "force_fp32", "use_split_cross_attention",
        "use_pytorch_cross_attention", "disable_metadata", "lowvram", "highvram", "multi_user", "auto_launch",
        "dont_print_server", "reserve_vram", "cache_lru", "default_hashing_function", "deterministic",
        "tls_keyfile", "cuda_device", "front_end_version"]

PACK = textwrap.dedent(f"""
    from comfy.cli_args import LatentPreviewMethod, PerformanceFeature, args

    AT_IMPORT = {{name: getattr(args, name) for name in {READ!r}}}

    class ReadFlags:
        RETURN_TYPES = ()
        OUTPUT_NODE = True
        FUNCTION = "run"
        CATEGORY = "test"

        @classmethod
        def INPUT_TYPES(cls):
            return {{"required": {{}}}}

        def run(self):
            now = {{name: getattr(args, name) for name in {READ!r}}}
            return {{"ui": {{"at_import": [AT_IMPORT], "now": [now],
                            "preview": [args.preview_method is LatentPreviewMethod.TAESD],
                            "fast": [sorted(f.value for f in args.fast)],
                            "fp16_accumulation": [PerformanceFeature.Fp16Accumulation in args.fast]}}}}

    NODE_CLASS_MAPPINGS = {{"ReadFlags": ReadFlags}}
""")


async def test_packs_read_the_flags_the_server_runs_with(tmp_path):
    pack = tmp_path / "custom_nodes" / "flag_reader"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PACK)
    argv = ["--base-directory", str(tmp_path), *ARGV]
    config = main.config_from_args(main.build_serve_parser().parse_args(argv), argv)
    state = build_state(config)
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    try:
        ws, _ = await ws_connect(server, "flags")
        status, body = await server.post_prompt({"1": {"class_type": "ReadFlags", "inputs": {}}}, client_id="flags")
        assert status == 200, body
        await collect_until_done(ws, body["prompt_id"])
        await ws.close()
        ui = (await server.get_json(f"/history/{body['prompt_id']}"))[body["prompt_id"]]["outputs"]["1"]
    finally:
        await server.close()
    expected = {
        "fp16_unet": True, "bf16_unet": False, "bf16_vae": True, "fp32_text_enc": True, "force_fp32": False,
        "use_split_cross_attention": True, "use_pytorch_cross_attention": False, "disable_metadata": True,
        "lowvram": True, "highvram": False, "multi_user": True, "auto_launch": True, "dont_print_server": True,
        "reserve_vram": 1.5, "cache_lru": 7, "default_hashing_function": "sha512", "deterministic": False,
        "tls_keyfile": None, "cuda_device": None, "front_end_version": "comfyanonymous/ComfyUI@latest",
    }
    assert ui["now"] == [expected] and ui["at_import"] == [expected]
    assert ui["preview"] == [True] and ui["fast"] == [["fp16_accumulation"]] and ui["fp16_accumulation"] == [True]
