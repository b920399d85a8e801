"""ComfyUI's `comfy.ldm.anima.model` for node packs: Anima's diffusion transformer and its LLM
adapter, which here are comfy_core/families/anima's networks, so a pack's
`isinstance(model.diffusion_model, comfy.ldm.anima.model.Anima)` holds for a loaded Anima model.

- `Anima` is our `AnimaDiT` (ComfyUI's `Anima(MiniTrainDIT)`; `comfy.ldm.cosmos.predict2.MiniTrainDIT`
  is the same class here): `llm_adapter`, `preprocess_text_embeds(text_embeds, text_ids,
  t5xxl_weights=None)`, `forward(x, timesteps, context, **kwargs)` popping `t5xxl_ids` /
  `t5xxl_weights`, `patch_spatial`, `blocks.N.self_attn` / `.cross_attn` (instances of
  `comfy.ldm.cosmos.predict2.Attention`, whose `forward(x, context, rope_emb, transformer_options)`
  packs replace per instance: prompt-control's and ppm's attention couple, ppm's NegPiP), and the
  DIFFUSION_MODEL wrappers (`executor.class_obj` is the network).
- `LLMAdapter`, `TransformerBlock`, `Attention` are the adapter's classes (comfy_core/families/anima/
  adapter.py `LLMAdapter`, `AdapterBlock`, `AdapterAttention`), with the same module names and
  weights; the constructors are ours (built from an `LLMAdapterConfig` by our loaders, not from
  ComfyUI's keyword arguments), and the adapter takes no attention masks (ComfyUI passes none).
- `rotate_half`, `apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)` and `RotaryEmbedding(head_dim)`
  are ComfyUI's rotate-half RoPE helpers (compat/ldm_anima.py); our adapter computes the same
  table with `comfy_core.families.anima.adapter.rotary`.
"""
from compat.facade import facade

_A = "comfy_core.families.anima.adapter:"
facade(__name__, {
    "Anima": "comfy_core.families.anima.dit:AnimaDiT",
    "MiniTrainDIT": "comfy_core.families.anima.dit:AnimaDiT",  # the name ComfyUI's module imports
    "LLMAdapter": _A + "LLMAdapter",
    "TransformerBlock": _A + "AdapterBlock",
    "Attention": _A + "AdapterAttention",
    **{name: "compat.ldm_anima:" + name for name in ("rotate_half", "apply_rotary_pos_emb", "RotaryEmbedding")},
})
