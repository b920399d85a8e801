"""OFT, BOFT and GLoRA LoRA files (LyCORIS's names, read as ComfyUI reads them in
comfy/weight_adapter/{oft,boft,glora}.py): key detection, the patched weight against a direct
computation (per-block matrices, BOFT's butterfly as a product of permuted block-diagonal
matrices), and LoraLoader on the tiny SD1 checkpoint changing the sampled output."""
from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.lora import parse_lora
from comfy_core.weights.adapters import BoftAdapter, GloraAdapter, OftAdapter

G = torch.Generator().manual_seed(11)
ATTN1 = "input_blocks.1.1.transformer_blocks.0.attn1"
ATTN2 = "input_blocks.1.1.transformer_blocks.0.attn2"
LAYER = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_{}_{}"


def rand(*shape: int, scale: float = 0.1) -> torch.Tensor:
    return torch.randn(*shape, generator=G) * scale


def cayley(block: torch.Tensor) -> torch.Tensor:
    q = block - block.T
    eye = torch.eye(block.shape[0])
    return (eye + q) @ torch.linalg.inv(eye - q)


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    return model, clip


def weight_of(patcher, key: str) -> torch.Tensor:
    with patcher.applied() as module:
        return dict(module.named_parameters())[key].detach().clone()


def load(model, tensors, strength=1.0):
    from comfy_core.lora import load_lora_for_models

    return load_lora_for_models(model, None, tensors, strength, 0.0)[0]


@pytest.mark.parametrize("strength", [1.0, 0.5])
def test_oft_rotates_each_block_of_output_rows(sd1, strength):
    model = sd1[0]
    key = f"diffusion_model.{ATTN1}.to_q.weight"
    w = weight_of(model, key)
    out = w.shape[0]
    k, n = 4, out // 4
    blocks = rand(k, n, n)
    layer = LAYER.format("attn1", "to_q")
    patched = load(model, {f"{layer}.oft_blocks": blocks, f"{layer}.alpha": torch.tensor(0.0)}, strength)
    expected = w.clone()
    for j in range(k):
        rows = w[j * n:(j + 1) * n]
        rot = strength * cayley(blocks[j]) - strength * torch.eye(n)
        expected[j * n:(j + 1) * n] += strength * (rot.T @ rows)  # ComfyUI's strength, twice
    torch.testing.assert_close(weight_of(patched, key), expected, rtol=1e-5, atol=1e-6)
    if strength == 1.0:  # a rotation: every block's row norms are kept
        got = weight_of(patched, key)
        for j in range(k):
            torch.testing.assert_close(torch.linalg.matrix_norm(got[j * n:(j + 1) * n]),
                                       torch.linalg.matrix_norm(w[j * n:(j + 1) * n]), rtol=1e-5, atol=1e-6)


def test_oft_constraint_caps_the_norm_of_the_skew_part():
    blocks = rand(2, 3, 3, scale=2.0)
    w = rand(6, 5, scale=1.0)
    constraint = 0.05
    q = blocks - blocks.transpose(1, 2)
    q = q * (constraint / (torch.linalg.vector_norm(q) + 1e-8))
    eye = torch.eye(3)
    expected = torch.cat([((eye + q[j]) @ torch.linalg.inv(eye - q[j])).T @ w[3 * j:3 * j + 3] for j in range(2)])
    got = OftAdapter(blocks, None, constraint).apply_to(w.clone(), 1.0, lambda t: t)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def butterfly_matrix(blocks: torch.Tensor, rows: int, strength: float = 1.0) -> torch.Tensor:
    """BOFT's rotation of all rows as one matrix: each factor i is the block-diagonal matrix of its
    rotations, conjugated by the permutation that pairs rows 2^i·b/2 apart."""
    m, k, b, _ = blocks.shape
    total = torch.eye(rows)
    for i in range(m):
        stride = 2 ** i * (b // 2)
        order = torch.arange(rows).view(-1, 2, stride).transpose(1, 2).reshape(-1)
        perm = torch.eye(rows)[order]  # (perm @ x) = x[order]
        rots = [cayley(blocks[i, j]) for j in range(k)]
        if strength != 1.0:
            rots = [r * strength + (1 - strength) * torch.eye(b) for r in rots]
        factor = perm.T @ torch.block_diag(*rots) @ perm
        total = factor @ total
    return total


@pytest.mark.parametrize("strength", [1.0, 0.7])
def test_boft_is_the_product_of_its_butterfly_factors(sd1, strength):
    model = sd1[0]
    key = f"diffusion_model.{ATTN1}.to_k.weight"
    w = weight_of(model, key)
    out = w.shape[0]
    b = 4
    k = out // b
    m = 2
    blocks = rand(m, k, b, b)
    rescale = 1.0 + rand(out, 1)
    layer = LAYER.format("attn1", "to_k")
    patched = load(model, {f"{layer}.oft_blocks": blocks, f"{layer}.rescale": rescale}, strength)
    rotated = (butterfly_matrix(blocks, out, strength) @ w) * rescale
    expected = w + strength * (rotated - w)
    torch.testing.assert_close(weight_of(patched, key), expected, rtol=1e-5, atol=1e-5)
    full = butterfly_matrix(blocks, out)
    torch.testing.assert_close(full @ full.T, torch.eye(out), rtol=1e-5, atol=1e-5)  # orthogonal


@pytest.mark.parametrize("which", ["new", "old"])
def test_glora_in_both_lycoris_layouts(sd1, which):
    model = sd1[0]
    key = f"diffusion_model.{ATTN2}.to_k.weight"  # [width, context]: not square
    w = weight_of(model, key)
    out, cin = w.shape
    r = 2
    layer = LAYER.format("attn2", "to_k")
    if which == "new":
        a1, a2, b1, b2 = rand(cin, r), rand(r, cin), rand(out, r), rand(r, cin)
        delta = (w @ a1) @ a2 + b1 @ b2
    else:
        a1, a2, b1, b2 = rand(r, cin), rand(cin, r), rand(r, cin), rand(out, r)
        delta = b2 @ b1 + (w @ a2) @ a1
    patched = load(model, {f"{layer}.a1.weight": a1, f"{layer}.a2.weight": a2, f"{layer}.b1.weight": b1,
                           f"{layer}.b2.weight": b2, f"{layer}.alpha": torch.tensor(1.0)}, 0.8)
    torch.testing.assert_close(weight_of(patched, key), w + 0.8 * (1.0 / r) * delta, rtol=1e-5, atol=1e-6)


def test_glora_on_a_square_weight_and_a_convolution():
    w = rand(6, 6, scale=1.0)
    a1, a2, b1, b2 = rand(6, 2), rand(2, 6), rand(6, 2), rand(2, 6)
    got = GloraAdapter(a1, a2, b1, b2, 4.0).apply_to(w.clone(), 1.0, lambda t: t)
    torch.testing.assert_close(got, w + 2.0 * ((w @ a1) @ a2 + b1 @ b2), rtol=1e-5, atol=1e-6)
    conv = rand(5, 3, 3, 3, scale=1.0)  # [out, in, kh, kw]: a1 / a2 act on the input channels
    a1, a2, b1, b2 = rand(3, 2), rand(2, 3), rand(5, 2), rand(2, 27)
    got = GloraAdapter(a1, a2, b1, b2, None).apply_to(conv.clone(), 1.0, lambda t: t)
    mixed = torch.einsum("oihw,ij,jk->okhw", conv, a1, a2)
    torch.testing.assert_close(got, conv + mixed + (b1 @ b2).reshape(conv.shape), rtol=1e-5, atol=1e-6)


def test_keys_are_detected_by_kind_and_misfits_or_dora_are_not_loaded(sd1, caplog):
    model = sd1[0]
    from comfy_core.lora import unet_key_map

    key_map = unet_key_map(model.model)
    oft, boft, glora = LAYER.format("attn1", "to_q"), LAYER.format("attn1", "to_k"), LAYER.format("attn2", "to_k")
    tensors = {f"{oft}.oft_blocks": rand(2, 2, 2), f"{boft}.oft_blocks": rand(1, 2, 2, 2),
               f"{glora}.a1.weight": rand(2, 2), f"{glora}.a2.weight": rand(2, 2),
               f"{glora}.b1.weight": rand(2, 2), f"{glora}.b2.weight": rand(2, 2)}
    parsed = parse_lora(tensors, key_map)
    kinds = {type(v).__name__ for v in parsed.patches.values()}
    assert kinds == {"OftAdapter", "BoftAdapter", "GloraAdapter"} and not parsed.unmatched
    # the same records are too small for the tiny model's layers: logged and skipped, as ComfyUI skips them
    with caplog.at_level(logging.WARNING):
        patched = load(model, tensors)
    assert patched.patches == {} or all(not v for v in patched.patches.values())
    assert "rotation blocks" in caplog.text
    dora = parse_lora({f"{oft}.oft_blocks": rand(2, 2, 2), f"{oft}.dora_scale": rand(1, 4)}, key_map)
    assert not dora.patches and sorted(dora.unmatched) == [f"{oft}.dora_scale", f"{oft}.oft_blocks"]


def test_the_lora_loader_node_applies_oft_boft_and_glora_to_the_tiny_sd1_model(sd1, tmp_path):
    from graph.context import NodeContext, reset_current, set_current
    from nodes.environment import Environment
    from nodes.patching import lora_loader

    model, clip = sd1
    keys = {name: f"diffusion_model.{name}.weight" for name in (f"{ATTN1}.to_q", f"{ATTN1}.to_k", f"{ATTN2}.to_k")}
    widths = {name: weight_of(model, key).shape for name, key in keys.items()}
    out_q, out_k = widths[f"{ATTN1}.to_q"][0], widths[f"{ATTN1}.to_k"][0]
    out2, cin2 = widths[f"{ATTN2}.to_k"]
    tensors = {
        f"{LAYER.format('attn1', 'to_q')}.oft_blocks": rand(4, out_q // 4, out_q // 4),
        f"{LAYER.format('attn1', 'to_k')}.oft_blocks": rand(2, out_k // 4, 4, 4),
        f"{LAYER.format('attn2', 'to_k')}.a1.weight": rand(cin2, 2),
        f"{LAYER.format('attn2', 'to_k')}.a2.weight": rand(2, cin2),
        f"{LAYER.format('attn2', 'to_k')}.b1.weight": rand(out2, 2),
        f"{LAYER.format('attn2', 'to_k')}.b2.weight": rand(2, cin2),
    }
    env = Environment.rooted_at(tmp_path)
    (tmp_path / "models" / "loras").mkdir(parents=True)
    save_file(tensors, str(tmp_path / "models" / "loras" / "lycoris.safetensors"))
    token = set_current(NodeContext("p1", "5", "5", None, env))
    try:
        got_model, _ = lora_loader(model, clip, "lycoris.safetensors", 1.0, 1.0)
    finally:
        reset_current(token)
    by_kind = {type(v[0][1] if isinstance(v, list) else v).__name__ for v in got_model.patches.values()}
    assert len([k for k, v in got_model.patches.items() if v]) == 3, by_kind
    for key in keys.values():
        assert not torch.equal(weight_of(got_model, key), weight_of(model, key))
    from comfy_core.sampling.ksampler import sample

    ctx = torch.randn(1, 77, model.model.diffusion_model.config.context_dim, generator=torch.Generator().manual_seed(1))
    cond, uncond = [[ctx, {}]], [[ctx * 0, {}]]
    latent = torch.zeros(1, 4, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(3))

    def run(patcher):
        return sample(patcher, noise, 2, 5.0, "euler", "normal", cond, uncond, latent, seed=3)

    assert not torch.allclose(run(got_model), run(model), atol=1e-4)
