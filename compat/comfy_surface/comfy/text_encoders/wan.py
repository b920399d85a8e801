"""ComfyUI's `comfy.text_encoders.wan` for node packs: Wan's umT5-XXL set and its tokenizers, our
classes (comfy_core/text_encoders/umt5.py, umt5_tokenizer.py):

- `WanT5Model`: the encoder set a CLIPLoader type "wan" CLIP's `cond_stage_model` is (its tower
  the child `umt5xxl`);
- `WanT5Tokenizer`: its tokenizer (tower tokenizer at `umt5xxl`, ComfyUI's `clip_umt5xxl`);
- `UMT5XXlModel`: the umT5 tower (our T5 tower with the attention mask and `zero_out_masked`);
- `UMT5XXlTokenizer`: the tower tokenizer over the file's SentencePiece model.

These classes are built by our loaders from the weights: their constructors are ours, not
ComfyUI's (`WanT5Model(device=..., dtype=...)` is not a way to make one here).
"""
from compat.facade import facade

facade(__name__, {
    "WanT5Model": "comfy_core.families.wan.encoders:WanT5Model",
    "WanT5Tokenizer": "comfy_core.families.wan.encoders:WanT5Tokenizer",
    "UMT5XXlModel": "comfy_core.text_encoders.umt5:UMT5XXlModel",
    "UMT5XXlTokenizer": "comfy_core.text_encoders.umt5_tokenizer:UMT5XXlTokenizer",
})
