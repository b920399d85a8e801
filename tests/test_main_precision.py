"""ComfyUI's precision flags (--force-fp16, --bf16-unet, --fp32-vae, --fp16-text-enc, ...): parsed
into names (no torch at start-up), put in the environment, and honoured by the loader nodes."""
from __future__ import annotations

import shutil

import pytest
import torch

import main
from graph.context import NodeContext, reset_current, set_current
from nodes.errors import NodeInputError
from nodes.loaders import checkpoint_loader_simple
from web.bootstrap import build_environment
from web.config import DtypeSettings, DtypeSettingsError


def _config(*argv: str, run: bool = False):
    parser = main.build_run_parser() if run else main.build_serve_parser()
    args = parser.parse_args(["w.json", *argv] if run else list(argv))
    return main.config_from_args(args, list(argv))


@pytest.mark.parametrize("argv, expected", [
    ((), (None, None, None)),
    (("--force-fp16",), ("fp16", None, None)),  # ComfyUI: force_fp16 sets fp16_unet
    (("--force-fp32",), ("fp32", "fp32", "fp32")),
    (("--force-fp16", "--bf16-unet"), ("bf16", None, None)),  # a component's own flag wins
    (("--force-fp32", "--fp16-vae", "--bf16-text-enc"), ("fp32", "fp16", "bf16")),
    (("--fp32-unet", "--bf16-vae", "--fp16-text-enc"), ("fp32", "bf16", "fp16")),
    (("--fp16-unet", "--fp32-vae", "--fp32-text-enc"), ("fp16", "fp32", "fp32")),
])
def test_precision_flags_become_dtype_names(argv, expected):
    dtype = _config(*argv).dtype
    assert (dtype.unet, dtype.vae, dtype.text_enc) == expected
    assert _config(*argv, run=True).dtype == dtype  # `main.py run` takes them too


@pytest.mark.parametrize("argv", [["--force-fp16", "--force-fp32"], ["--fp16-unet", "--bf16-unet"],
                                  ["--fp16-vae", "--fp32-vae"], ["--fp32-text-enc", "--bf16-text-enc"]])
def test_precision_flags_of_one_group_exclude_each_other(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main.main(argv)
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--fp8_e4m3fn-unet", "--fp8_e5m2-unet", "--fp8_e8m0fnu-unet", "--fp64-unet",
                                  "--fp8_e4m3fn-text-enc", "--fp8_e5m2-text-enc"])
def test_unsupported_precisions_are_accepted_and_change_no_dtype(flag):
    dtype = _config(flag).dtype
    assert (dtype.unet, dtype.vae, dtype.text_enc) == (None, None, None)
    with pytest.raises(SystemExit):  # still in ComfyUI's exclusive groups
        main.build_serve_parser().parse_args([flag, "--fp16-unet" if "unet" in flag else "--fp16-text-enc"])


def test_dtype_settings_refuse_bad_values():
    with pytest.raises(DtypeSettingsError, match="unet"):
        DtypeSettings(unet="fp8")
    with pytest.raises(DtypeSettingsError, match="--force-fp16 and --force-fp32"):
        DtypeSettings.from_flags(force_fp16=True, force_fp32=True)
    assert DtypeSettings(unet="bf16", text_enc="fp32").policy_names() == {"unet": "bf16", "text": "fp32"}


@pytest.fixture
def ckpt_base(tmp_path, tiny_sd1_ckpt):
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "a.safetensors")
    return tmp_path


def _load(env):
    token = set_current(NodeContext("p", "1", "1", None, env, class_type="CheckpointLoaderSimple"))
    try:
        return checkpoint_loader_simple("a.safetensors")
    finally:
        reset_current(token)


def _dtypes(loaded) -> tuple:
    model, clip, vae = loaded
    return (model.model.get_dtype(), next(vae.model.parameters()).dtype,
            {p.dtype for p in clip.patcher.model.parameters()})


def test_flags_reach_the_loaded_models_dtypes(ckpt_base):
    argv = ["--base-directory", str(ckpt_base), "--cpu", "--bf16-unet", "--fp16-vae", "--fp32-text-enc"]
    env, _ = build_environment(_config(*argv))
    assert env.dtype_policy == {"unet": "bf16", "vae": "fp16", "text": "fp32"}
    assert _dtypes(_load(env)) == (torch.bfloat16, torch.float16, {torch.float32})
    # Without flags: the CPU defaults (UNet and VAE fp32, text encoders store fp16).
    plain, _ = build_environment(_config("--base-directory", str(ckpt_base), "--cpu"))
    assert plain.dtype_policy is None
    assert _dtypes(_load(plain)) == (torch.float32, torch.float32, {torch.float16})


@pytest.mark.parametrize("policy, needle", [({"unet": "fp8"}, "env.dtype_policy['unet']"),
                                            ({"clip": "fp16"}, "components among"),
                                            ("fp16", "a DtypePolicy")])
def test_a_bad_environment_dtype_policy_is_a_typed_error(ckpt_base, policy, needle):
    env, _ = build_environment(_config("--base-directory", str(ckpt_base), "--cpu"))
    env.dtype_policy = policy
    with pytest.raises(NodeInputError, match=r"^CheckpointLoaderSimple \(node 1\): input .env\.dtype_policy") as exc:
        _load(env)
    assert needle in str(exc.value)
