"""comfy_core.devices.attention_probe: SDPA by default, a requested or preferred backend when its
probe passes on the device, else SDPA with one log line."""
from __future__ import annotations

import logging

import pytest
import torch

from comfy_core.devices import attention_probe
from comfy_core.devices.attention_probe import attention_backend_for


@pytest.fixture(autouse=True)
def fresh_log_memory(monkeypatch):
    monkeypatch.setattr(attention_probe, "_logged", set())


def test_sdpa_is_the_default_and_needs_no_probe():
    calls = []
    assert attention_backend_for("cuda", torch.float16, probe=lambda *a: calls.append(a)) == "sdpa"
    assert attention_backend_for("cpu", torch.float32, prefer_xformers=True, probe=lambda *a: calls.append(a)) == "sdpa"
    assert calls == []  # xformers is only ever preferred on CUDA


def test_a_working_backend_is_kept():
    assert attention_backend_for("cuda", torch.float16, prefer_xformers=True, probe=lambda *a: None) == "xformers"
    assert attention_backend_for("cuda", torch.float16, requested="xformers", probe=lambda *a: None) == "xformers"


def test_a_failing_probe_falls_back_to_sdpa_with_one_log_line(caplog):
    caplog.set_level(logging.WARNING)
    seen = []

    def broken(name, device, dtype):
        seen.append((name, device.type, dtype))
        return "no kernel image for this GPU"

    for _ in range(3):
        assert attention_backend_for("cuda", torch.float16, requested="xformers", probe=broken) == "sdpa"
    assert seen[0] == ("xformers", "cuda", torch.float16)
    lines = [r.getMessage() for r in caplog.records if "attention:" in r.getMessage()]
    assert lines == ["attention: xformers cannot run on cuda/float16 (no kernel image for this GPU); using sdpa"]
    attention_backend_for("cuda", torch.bfloat16, requested="xformers", probe=broken)
    assert len([r for r in caplog.records if "attention:" in r.getMessage()]) == 2  # another dtype: its own line


def test_the_real_probe_on_this_machine():
    # xformers never runs on the CPU: whatever is installed, the CPU gets sdpa.
    assert attention_backend_for("cpu", torch.float32, requested="xformers") == "sdpa"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_probe_on_the_gpu_gives_a_backend_that_runs():
    from comfy_core.attention import AttentionChoice, attention_heads, use_backend

    name = attention_backend_for("cuda", torch.float16, prefer_xformers=True)
    q = torch.randn(1, 2, 16, 8, device="cuda", dtype=torch.float16)
    with use_backend(AttentionChoice.of(name)):
        out = attention_heads(q, q, q)
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float())
    torch.testing.assert_close(out.float(), expected, atol=2e-3, rtol=2e-3)


def test_loaders_give_new_models_the_flag_s_backend_or_sdpa_where_it_cannot_run(monkeypatch, tiny_sd1_ckpt):
    from types import SimpleNamespace

    import nodes.loaders as loaders
    from comfy_core import load_checkpoint
    from comfy_core.attention import unavailable_reason

    model, _, vae = load_checkpoint(tiny_sd1_ckpt, output_clip=False)
    if unavailable_reason("xformers", torch.device("cpu"), torch.float32) is None:
        pytest.skip("xformers runs on this CPU")
    env = SimpleNamespace(attention_backend="xformers", vae_attention_backend="sub_quadratic")
    monkeypatch.setattr(loaders, "current_env", lambda: env)
    loaders._default_attention(model, vae)
    assert model.attention_choice().name == "sdpa"
    assert vae.attention_choice().name == "sub_quadratic"
