"""The CLIP text transformer's attention on a CPU is ComfyUI's basic attention for small inputs
(comfy/ldm/modules/attention.py `attention_basic`, chosen by `optimized_attention_for_device(...,
small_input=True)` where PyTorch attention is not enabled): scores of the heads folded into the
batch, times the scale, plus the causal mask, softmax, product. The same operations give the
same bits, which matters where a prompt engine divides by a mean of the conditioning (smZNodes'
mean normalisation on a tiny random CLIP amplifies a 1e-6 difference into 100 levels)."""
from __future__ import annotations

import torch

from comfy_core.text_encoders.clip_text_model import ClipAttention, ClipTextModelConfig


def comfyui_basic_attention(q, k, v, heads, mask):
    """ComfyUI's `attention_basic` steps, on [B, T, W] projections."""
    b, t, width = q.shape
    d = width // heads
    q, k, v = (x.unsqueeze(3).reshape(b, -1, heads, d).permute(0, 2, 1, 3).reshape(b * heads, -1, d).contiguous()
               for x in (q, k, v))
    sim = torch.einsum("b i d, b j d -> b i j", q.float(), k.float()) * d ** -0.5
    sim = sim + mask.reshape(1, -1, t, t).expand(b, heads, -1, -1).reshape(-1, t, t)
    sim = sim.softmax(dim=-1)
    out = torch.einsum("b i j, b j d -> b i d", sim.to(v.dtype), v)
    return out.unsqueeze(0).reshape(b, heads, -1, d).permute(0, 2, 1, 3).reshape(b, -1, heads * d)


def test_clip_attention_on_a_cpu_is_comfyuis_basic_attention_to_the_bit():
    torch.manual_seed(0)
    config = ClipTextModelConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=4, max_position_embeddings=77, projection_dim=64)
    attn = ClipAttention(config).eval()
    x = torch.randn(2, 77, 64)
    mask = torch.full((77, 77), -torch.finfo(torch.float32).max).triu_(1)  # ComfyUI's causal mask
    with torch.no_grad():
        got = attn(x, mask[None, None])
        expected = attn.out_proj(comfyui_basic_attention(attn.q_proj(x), attn.k_proj(x), attn.v_proj(x), 4, mask))
    assert torch.equal(got, expected)
