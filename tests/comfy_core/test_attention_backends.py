"""Attention backends: agreement with the naive reference, masks, options, per-context choice."""
from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comfy_core.attention import (
    AttentionBackendError,
    AttentionBackendUnavailable,
    AttentionChoice,
    attention,
    available_backends,
    backend_names,
    current_backend,
    require_backend,
    use_backend,
)

BACKENDS = available_backends(torch.device("cpu"), torch.float32)


def _inputs(seed: int, b: int = 2, nq: int = 37, nk: int = 23, heads: int = 3, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, nq, heads * d, generator=g)
    k = torch.randn(b, nk, heads * d, generator=g)
    v = torch.randn(b, nk, heads * d, generator=g)
    return q, k, v, heads


def _masks(b: int, heads: int, nq: int, nk: int) -> dict[str, torch.Tensor | None]:
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(b, heads, nq, nk, generator=g) > 0.4
    keep[..., 0] = True  # every query keeps at least one key (no all-masked rows)
    key_keep = torch.rand(b, 1, 1, nk, generator=g) > 0.3
    key_keep[..., 0] = True
    return {
        "none": None,
        "bool_full": keep,
        "bool_keys": key_keep,
        "additive_full": torch.randn(b, heads, nq, nk, generator=g),
        "additive_2d": torch.randn(nq, nk, generator=g),
        "additive_keys": torch.randn(b, 1, 1, nk, generator=g),
    }


def _run(name: str, q, k, v, heads, mask, **options):
    with use_backend(name, **options):
        return attention(q, k, v, heads, mask)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_kind", ["none", "bool_full", "bool_keys", "additive_full", "additive_2d", "additive_keys"])
def test_backend_agrees_with_naive(backend, mask_kind):
    q, k, v, heads = _inputs(seed=hash(mask_kind) % 1000)
    mask = _masks(q.shape[0], heads, q.shape[1], k.shape[1])[mask_kind]
    expected = _run("naive", q, k, v, heads, mask)
    got = _run(backend, q, k, v, heads, mask)
    assert got.shape == (2, 37, 24)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("qc,kc", [(1, 1), (5, 7), (16, 4), (1000, 1000)])
def test_sub_quadratic_chunk_sizes_agree(qc, kc):
    q, k, v, heads = _inputs(seed=3, nq=41, nk=29)
    mask = _masks(2, heads, 41, 29)["bool_full"]
    expected = _run("naive", q, k, v, heads, mask)
    got = _run("sub_quadratic", q, k, v, heads, mask, query_chunk_size=qc, kv_chunk_size=kc)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("slices", [1, 2, 5, 37])
def test_split_slices_agree(slices):
    q, k, v, heads = _inputs(seed=4)
    mask = _masks(2, heads, 37, 23)["additive_full"]
    expected = _run("naive", q, k, v, heads, mask)
    torch.testing.assert_close(_run("split", q, k, v, heads, mask, slices=slices), expected, atol=1e-5, rtol=0)


def test_self_attention_and_large_magnitudes_stay_finite():
    q, k, v, heads = _inputs(seed=5, nq=64, nk=64)
    q = q * 30  # scores of several hundred: the running max must keep exp() finite
    expected = _run("naive", q, q, v, heads, None)
    for name in BACKENDS:
        got = _run(name, q, q, v, heads, None)
        assert torch.isfinite(got).all(), name
        # Scores in the hundreds make softmax sharp: summation order shows at 1e-4 here.
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=0)


def test_options_reach_the_chosen_kernel():
    # Invalid options raise inside the kernel: proof that the call went to that backend.
    q, k, v, heads = _inputs(seed=6)
    with pytest.raises(ValueError, match="query_chunk_size"):
        _run("sub_quadratic", q, k, v, heads, None, query_chunk_size=0)
    with pytest.raises(ValueError, match="slices"):
        _run("split", q, k, v, heads, None, slices=0)


def test_default_is_sdpa_and_context_restores():
    assert current_backend() == AttentionChoice("sdpa")
    with use_backend("naive"):
        assert current_backend().name == "naive"
        with use_backend("sub_quadratic", query_chunk_size=8):
            assert current_backend() == AttentionChoice("sub_quadratic", (("query_chunk_size", 8),))
        assert current_backend().name == "naive"
    assert current_backend().name == "sdpa"


def test_unknown_backend_and_unknown_option_are_typed_errors():
    with pytest.raises(AttentionBackendError, match="unknown attention backend 'flash9'"):
        AttentionChoice.of("flash9")
    with pytest.raises(AttentionBackendError, match="chunk"):
        AttentionChoice.of("naive", {"query_chunk_size": 4})


def test_xformers_listed_but_unavailable_names_what_is_missing():
    assert "xformers" in backend_names()
    try:
        import xformers.ops  # noqa: F401
    except Exception:
        pass
    else:
        pytest.skip("xformers is importable here")
    assert "xformers" not in available_backends(torch.device("cpu"))
    with pytest.raises(AttentionBackendUnavailable, match="xformers") as info:
        require_backend("xformers", torch.device("cpu"), torch.float16)
    assert "install" in info.value.reason
    q, k, v, heads = _inputs(seed=1)
    with use_backend("xformers"), pytest.raises(AttentionBackendUnavailable):
        attention(q, k, v, heads)


def test_each_thread_sees_its_own_backend():
    barrier = threading.Barrier(2)
    seen: dict[str, str] = {}
    q, k, v, heads = _inputs(seed=2)

    def work(name: str) -> None:
        with use_backend(name):
            barrier.wait()  # both threads are inside their context at once
            attention(q, k, v, heads)
            seen[name] = current_backend().name
            barrier.wait()

    threads = [threading.Thread(target=work, args=(n,)) for n in ("naive", "sub_quadratic")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"naive": "naive", "sub_quadratic": "sub_quadratic"}
    assert current_backend().name == "sdpa"



@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 2), heads=st.integers(1, 3), nq=st.integers(1, 40), nk=st.integers(1, 40),
       qc=st.integers(1, 48), kc=st.integers(1, 48), slices=st.integers(1, 45), seed=st.integers(0, 10_000))
def test_chunked_backends_agree_for_any_shape_and_chunking(b, heads, nq, nk, qc, kc, slices, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, nq, heads * 4, generator=g)
    k = torch.randn(b, nk, heads * 4, generator=g)
    v = torch.randn(b, nk, heads * 4, generator=g)
    mask = torch.randn(b, 1, nq, nk, generator=g)
    expected = _run("naive", q, k, v, heads, mask)
    torch.testing.assert_close(_run("sub_quadratic", q, k, v, heads, mask, query_chunk_size=qc, kv_chunk_size=kc),
                               expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(_run("split", q, k, v, heads, mask, slices=slices), expected, atol=1e-5, rtol=0)


def test_k_and_v_are_split_by_qs_batch_as_comfyui_views_them():
    # HyperTile-style packs tile only q ([B*tiles, N/tiles, C]); ComfyUI views k and v with q's
    # batch too (`view(b, -1, heads, d)`), spreading their tokens over the tiles.
    g = torch.Generator().manual_seed(3)
    heads, d = 2, 4
    q = torch.randn(4, 3, heads * d, generator=g)  # 4 tiles of 3 tokens
    k, v = torch.randn(1, 8, heads * d, generator=g), torch.randn(1, 8, heads * d, generator=g)
    out = attention(q, k, v, heads)
    kk, vv = k.reshape(4, 2, heads * d), v.reshape(4, 2, heads * d)  # 8 tokens over the 4 tiles
    assert torch.allclose(out, attention(q, kk, vv, heads), atol=1e-6) and out.shape == (4, 3, heads * d)
