"""ComfyUI's `comfy.text_encoders.spiece_tokenizer` for node packs: `SPieceTokenizer`, the
SentencePiece wrapper a umT5 tokenizer's `.tokenizer` is (our
comfy_core/text_encoders/umt5_tokenizer.py: `SentencePieceTokenizer`, the same surface:
`tokenizer(text)["input_ids"]` ending with `</s>`, `get_vocab()`, `serialize_model()`). Its
constructor takes the serialized model's bytes (`SentencePieceTokenizer.from_tensor` the
`spiece_model` tensor), not ComfyUI's path-or-tensor argument."""
from compat.facade import facade

facade(__name__, {
    "SPieceTokenizer": "comfy_core.text_encoders.umt5_tokenizer:SentencePieceTokenizer",
})
