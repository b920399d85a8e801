"""ComfyUI's `comfy.text_encoders.z_image` for node packs: Z-Image's Qwen3-4B encoder set and its
tokenizer, our classes (`comfy_core.families.zimage.clip`; the tower `comfy_core.text_encoders.qwen3`,
the Qwen byte-level BPE tokenizer `comfy_core.text_encoders.qwen_tokenizer`):

- `ZImageTEModel`: the set a CLIPLoader type "lumina2" CLIP of a Qwen3-4B file has as its
  `cond_stage_model` (its tower the child `qwen3_4b`);
- `ZImageTokenizer`: its tokenizer (the prompt in `llama_template`, the chat template's user turn
  with the assistant turn opened, weights disabled; `tokenize_with_weights(text, return_word_ids=False,
  llama_template=None)`);
- `Qwen3_4BModel`: the Qwen3 tower (hidden state of the next-to-last layer, no final norm);
- `Qwen3Tokenizer`: the Qwen tokenizer (pad `<|endoftext|>`, one chunk, no start or end token).

These are built by our loaders from the weights: their constructors are ours, not ComfyUI's. The
vocabulary is our packed Qwen BPE data, so there is no `qwen25_tokenizer/` folder beside this file
(a pack that opens one with transformers' `Qwen2Tokenizer` finds none and falls back, as on a
ComfyUI without it)."""
from compat.facade import facade

facade(__name__, {
    "ZImageTEModel": "comfy_core.families.zimage.clip:ZImageTEModel",
    "ZImageTokenizer": "comfy_core.families.zimage.clip:ZImageTokenizer",
    "Qwen3_4BModel": "comfy_core.text_encoders.qwen3:Qwen3TextEncoder",
    "Qwen3Tokenizer": "comfy_core.text_encoders.qwen_tokenizer:QwenTokenizer",
})
