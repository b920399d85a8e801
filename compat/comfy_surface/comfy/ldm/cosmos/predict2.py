"""ComfyUI's `comfy.ldm.cosmos.predict2` for node packs: Cosmos-Predict2's `MiniTrainDIT` and its
parts, which here are the Anima family's network (comfy_core/families/anima/dit.py: ComfyUI's
`comfy.ldm.anima.model.Anima` is a `MiniTrainDIT` subclass with an LLM adapter, and no Cosmos-
Predict2 model is built here), so a pack's `isinstance(module, comfy.ldm.cosmos.predict2.Attention)`
finds the attention modules of a loaded Anima network.

What matches ComfyUI's: module names (`blocks.N.self_attn` / `.cross_attn`, `mlp`, `x_embedder`,
`t_embedder`, `final_layer`, `patch_spatial`), `Attention.forward(x, context=None, rope_emb=None,
transformer_options=None)` split into `compute_qkv(x, context, rope_emb=, transformer_options=)` ->
q, k, v `[B, S, H, d]` and `compute_attention(q, k, v, transformer_options=)` -> `[B, S, D]`
(comfyui-tooling-nodes' regional prompts replace `forward` with their own over those two), and the
`attn1_patch` / `attn2_patch` / `mlp_patch` / `post_input` hooks. What differs: the constructors
are ours (built from an `AnimaConfig` by our loaders, not from ComfyUI's keyword config), and the
RoPE passed as `rope_emb` is our `(cos, sin)` pair `[S, d/2]`, not ComfyUI's `[S, 1, 1, d/2, 2, 2]`
rotation tensor; a pack that only passes it on (as the regional-prompt patch does) is unaffected.
`Timesteps` is the weightless sinusoid `t_embedder.0`; `GPT2FeedForward` the blocks' MLP.
`Attention` has ComfyUI's `v_norm` (an identity), which packs re-implementing `compute_qkv` call.
`apply_rotary_pos_emb(t, freqs)` is ComfyUI's function (compat/ldm_anima.py), taking ComfyUI's
`[..., d/2, 2, 2]` rotation tensor or the `(cos, sin)` pair our blocks pass as `rope_emb`.
"""
from compat.facade import facade

_M = "comfy_core.families.anima.dit:"
facade(__name__, {
    "MiniTrainDIT": _M + "AnimaDiT",
    **{name: _M + name for name in ("Attention", "Block", "FinalLayer", "PatchEmbed")},
    "GPT2FeedForward": _M + "FeedForward",
    "Timesteps": _M + "_Sinusoid",
    "apply_rotary_pos_emb": "compat.ldm_anima:cosmos_apply_rotary_pos_emb",
})
