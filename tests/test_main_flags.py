"""Every ComfyUI 0.3.64 command-line flag is accepted with its spelling and value shape; those with
a meaning here act, the others are named in one start-up warning."""
from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import main
from web.config import ServerConfig
from web.flags import NO_EFFECT, PerformanceFeature, comfy_namespace, flags_without_effect

REPO = Path(__file__).resolve().parents[1]

# ComfyUI 0.3.64's flags (comfy/cli_args.py), each with a value of the shape it takes, and the
# attribute name ComfyUI gives it. Written out here so the test does not need ComfyUI.
COMFYUI_FLAGS: list[tuple[list[str], str]] = [
    (["--listen"], "listen"), (["--listen", "0.0.0.0"], "listen"), (["--port", "8189"], "port"),
    (["--tls-keyfile", "k.pem", "--tls-certfile", "c.pem"], "tls_keyfile"),
    (["--enable-cors-header"], "enable_cors_header"), (["--enable-cors-header", "http://a.test"], "enable_cors_header"),
    (["--max-upload-size", "50"], "max_upload_size"), (["--base-directory", "."], "base_directory"),
    (["--extra-model-paths-config", "a.yaml", "b.yaml"], "extra_model_paths_config"),
    (["--output-directory", "o"], "output_directory"), (["--temp-directory", "t"], "temp_directory"),
    (["--input-directory", "i"], "input_directory"), (["--auto-launch"], "auto_launch"),
    (["--disable-auto-launch"], "disable_auto_launch"), (["--cuda-device", "1"], "cuda_device"),
    (["--default-device", "1"], "default_device"), (["--cuda-malloc"], "cuda_malloc"),
    (["--disable-cuda-malloc"], "disable_cuda_malloc"), (["--force-fp32"], "force_fp32"),
    (["--force-fp16"], "force_fp16"), (["--fp32-unet"], "fp32_unet"), (["--fp64-unet"], "fp64_unet"),
    (["--bf16-unet"], "bf16_unet"), (["--fp16-unet"], "fp16_unet"), (["--fp8_e4m3fn-unet"], "fp8_e4m3fn_unet"),
    (["--fp8_e5m2-unet"], "fp8_e5m2_unet"), (["--fp8_e8m0fnu-unet"], "fp8_e8m0fnu_unet"),
    (["--fp16-vae"], "fp16_vae"), (["--fp32-vae"], "fp32_vae"), (["--bf16-vae"], "bf16_vae"),
    (["--cpu-vae"], "cpu_vae"), (["--fp8_e4m3fn-text-enc"], "fp8_e4m3fn_text_enc"),
    (["--fp8_e5m2-text-enc"], "fp8_e5m2_text_enc"), (["--fp16-text-enc"], "fp16_text_enc"),
    (["--fp32-text-enc"], "fp32_text_enc"), (["--bf16-text-enc"], "bf16_text_enc"),
    (["--force-channels-last"], "force_channels_last"), (["--directml"], "directml"),
    (["--directml", "0"], "directml"), (["--oneapi-device-selector", "level_zero:0"], "oneapi_device_selector"),
    (["--disable-ipex-optimize"], "disable_ipex_optimize"), (["--supports-fp8-compute"], "supports_fp8_compute"),
    (["--preview-method", "taesd"], "preview_method"), (["--preview-size", "256"], "preview_size"),
    (["--cache-classic"], "cache_classic"), (["--cache-lru", "10"], "cache_lru"), (["--cache-none"], "cache_none"),
    (["--use-split-cross-attention"], "use_split_cross_attention"),
    (["--use-quad-cross-attention"], "use_quad_cross_attention"),
    (["--use-pytorch-cross-attention"], "use_pytorch_cross_attention"),
    (["--use-sage-attention"], "use_sage_attention"), (["--use-flash-attention"], "use_flash_attention"),
    (["--disable-xformers"], "disable_xformers"), (["--force-upcast-attention"], "force_upcast_attention"),
    (["--dont-upcast-attention"], "dont_upcast_attention"), (["--gpu-only"], "gpu_only"),
    (["--highvram"], "highvram"), (["--normalvram"], "normalvram"), (["--lowvram"], "lowvram"),
    (["--novram"], "novram"), (["--cpu"], "cpu"), (["--reserve-vram", "1.5"], "reserve_vram"),
    (["--async-offload"], "async_offload"), (["--force-non-blocking"], "force_non_blocking"),
    (["--default-hashing-function", "md5"], "default_hashing_function"),
    (["--disable-smart-memory"], "disable_smart_memory"), (["--deterministic"], "deterministic"),
    (["--fast"], "fast"), (["--fast", "fp16_accumulation", "autotune"], "fast"),
    (["--mmap-torch-files"], "mmap_torch_files"), (["--disable-mmap"], "disable_mmap"),
    (["--dont-print-server"], "dont_print_server"), (["--quick-test-for-ci"], "quick_test_for_ci"),
    (["--windows-standalone-build"], "windows_standalone_build"), (["--disable-metadata"], "disable_metadata"),
    (["--disable-all-custom-nodes"], "disable_all_custom_nodes"),
    (["--whitelist-custom-nodes", "a", "b"], "whitelist_custom_nodes"), (["--disable-api-nodes"], "disable_api_nodes"),
    (["--multi-user"], "multi_user"), (["--verbose"], "verbose"), (["--verbose", "WARNING"], "verbose"),
    (["--log-stdout"], "log_stdout"), (["--front-end-version", "Comfy-Org/ComfyUI_frontend@1.2.3"], "front_end_version"),
    (["--front-end-root", "."], "front_end_root"), (["--user-directory", "."], "user_directory"),
    (["--enable-compress-response-body"], "enable_compress_response_body"),
    (["--comfy-api-base", "https://api.example.test"], "comfy_api_base"),
    (["--database-url", "sqlite:///:memory:"], "database_url"),
    # today's ComfyUI (comfy/cli_args.py @f90acc3b, Comfy-Org/ComfyUI)
    (["--feature-flag", "show_signin_button=true"], "feature_flag"),
    (["--enable-assets"], "enable_assets"), (["--enable-asset-hashing"], "enable_asset_hashing"),
    (["--disable-assets"], "disable_assets"),
]


def _parse(*argv: str):
    parser = main.build_serve_parser()
    return parser, parser.parse_args(list(argv))


def _config(*argv: str):
    return main.config_from_args(_parse(*argv)[1], list(argv))


@pytest.mark.parametrize("argv, dest", COMFYUI_FLAGS, ids=[" ".join(a) for a, _ in COMFYUI_FLAGS])
def test_every_comfyui_flag_is_accepted_under_its_attribute_name(argv, dest):
    parser, args = _parse(*argv)
    namespace = comfy_namespace(args)
    assert dest in namespace and namespace[dest] != comfy_namespace(parser.parse_args([]))[dest]


def test_the_namespace_has_every_comfyui_attribute_and_its_post_processing():
    names = {dest for _, dest in COMFYUI_FLAGS} | {"tls_certfile"}
    defaults = comfy_namespace(_parse()[1])
    assert names <= set(defaults) and set(defaults) - names == {"cache_ram"}  # ours, not in ComfyUI 0.3.64
    assert defaults["fast"] == set() and defaults["auto_launch"] is False and defaults["preview_method"] == "none"
    assert comfy_namespace(_parse("--fast")[1])["fast"] == set(PerformanceFeature)
    assert comfy_namespace(_parse("--fast", "autotune")[1])["fast"] == {PerformanceFeature.AutoTune}
    assert comfy_namespace(_parse("--force-fp16")[1])["fp16_unet"] is True
    assert comfy_namespace(_parse("--windows-standalone-build")[1])["auto_launch"] is True
    assert comfy_namespace(_parse("--windows-standalone-build", "--disable-auto-launch")[1])["auto_launch"] is False


def test_flags_without_effect_are_named_and_acting_ones_are_not():
    parser, args = _parse("--lowvram", "--fast", "--multi-user", "--disable-metadata", "--use-quad-cross-attention",
                          "--fp8_e4m3fn-unet", "--preview-method", "taesd", "--deterministic", "--async-offload")
    assert flags_without_effect(args, parser) == ["--fp8_e4m3fn-unet", "--async-offload", "--fast"]
    assert flags_without_effect(*_parse()) == []
    assert not set(NO_EFFECT) & {"disable_metadata", "use_quad_cross_attention", "use_split_cross_attention",
                                 "tls_keyfile", "front_end_root", "preview_method", "deterministic", "cuda_device",
                                 "gpu_only", "highvram", "normalvram", "lowvram", "novram", "reserve_vram"}


def test_main_logs_the_flags_without_effect_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    assert main.main(["--base-directory", str(tmp_path), "--quick-test-for-ci", "--disable-all-custom-nodes",
                      "--highvram", "--disable-smart-memory", "--disable-metadata"]) == 0
    lines = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert lines == ["accepted, but no effect on this build: --disable-smart-memory"]


@pytest.mark.parametrize("argv, model, vae", [
    ((), None, None), (("--use-pytorch-cross-attention",), None, None),
    (("--use-split-cross-attention",), "split", "split"),
    (("--use-quad-cross-attention",), "sub_quadratic", "split"),  # ComfyUI's VAE has no sub-quadratic path
])
def test_attention_flags_choose_the_default_backends(argv, model, vae):
    config = _config(*argv)
    assert (config.attention_backend, config.vae_attention_backend) == (model, vae)


def test_server_flags_that_act_reach_the_config():
    config = _config("--disable-metadata", "--disable-mmap", "--reserve-vram", "2", "--deterministic",
                     "--dont-print-server", "--log-stdout", "--enable-compress-response-body", "--front-end-root", ".")
    assert config.disable_metadata and not config.mmap and config.reserve_vram_gb == 2.0 and config.deterministic
    assert not config.print_server and config.log_stdout and config.compress_response_body
    assert config.front_end_root == Path(".") and not config.auto_launch
    assert _config("--auto-launch").auto_launch and _config("--windows-standalone-build").auto_launch
    assert not _config("--auto-launch", "--disable-auto-launch").auto_launch


def test_device_flags_set_the_visible_devices_before_torch_loads():
    environ: dict[str, str] = {}
    main.apply_process_flags(_config("--cuda-device", "3", "--deterministic"), environ)
    assert environ == {"CUDA_VISIBLE_DEVICES": "3", "HIP_VISIBLE_DEVICES": "3", "ASCEND_RT_VISIBLE_DEVICES": "3",
                       "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    environ = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    main.apply_process_flags(_config("--default-device", "2", "--oneapi-device-selector", "level_zero:1",
                                     "--deterministic"), environ)
    order = environ["CUDA_VISIBLE_DEVICES"].split(",")
    assert order[:3] == ["2", "0", "1"] and len(order) == 32 and environ["HIP_VISIBLE_DEVICES"] == ",".join(order)
    assert environ["ONEAPI_DEVICE_SELECTOR"] == "level_zero:1" and environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    environ = {}
    main.apply_process_flags(_config(), environ)
    assert environ == {}


def test_the_start_banner_and_auto_launch():
    opened: list[str] = []
    out = io.StringIO()
    main.announce(_config("--port", "8190"), ["http://127.0.0.1:8190"], 0.0, open_browser=opened.append, out=out)
    assert "To see the GUI go to: http://127.0.0.1:8190" in out.getvalue() and opened == []
    out = io.StringIO()
    main.announce(_config("--dont-print-server", "--auto-launch", "--port", "0"), ["http://127.0.0.1:4321"], 0.0,
                  open_browser=opened.append, out=out)
    assert out.getvalue() == "" and opened == ["http://127.0.0.1:4321"]
    main.announce(_config("--windows-standalone-build", "--listen", "0.0.0.0"), [], 0.0,
                  open_browser=opened.append, out=io.StringIO())
    assert opened[-1] == "http://127.0.0.1:8188"


def test_log_stdout_sends_records_below_error_to_stdout():
    def run(use_stdout: bool) -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        logger = logging.Logger("flags-test")
        for handler in main.log_handlers(use_stdout=use_stdout, stdout=out, stderr=err):
            logger.addHandler(handler)
        logger.warning("note")
        logger.error("broken")
        return out.getvalue(), err.getvalue()

    out, err = run(True)
    assert "note" in out and "broken" not in out and "broken" in err and "note" not in err
    out, err = run(False)
    assert out == "" and "note" in err and "broken" in err


def test_deterministic_switches_torch_to_deterministic_algorithms_in_the_warm_up(tmp_path):
    # A fresh interpreter: the switch is process-wide, and this one must keep torch's default.
    code = textwrap.dedent(f"""
        from types import SimpleNamespace
        import torch
        from web.warmup import warm_up
        before = torch.are_deterministic_algorithms_enabled()
        warm_up(SimpleNamespace(memory=None), modules=[], deterministic=True)
        print(before, torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_vram_flags_reach_the_config():
    assert _config().vram_mode is None
    for flag, mode in (("--gpu-only", "gpu_only"), ("--highvram", "highvram"), ("--normalvram", "normalvram"),
                       ("--lowvram", "lowvram"), ("--novram", "novram")):
        assert _config(flag).vram_mode == mode
    with pytest.raises(ValueError, match="vram_mode"):
        ServerConfig(vram_mode="tinyvram")
