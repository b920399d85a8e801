"""The kinds of text tower an encoder set may hold, and how each is found, built and tokenized.

An `EncoderOptions.kind` names one: "clip" (CLIP / OpenCLIP text transformers: `ClipTextConfig`,
`ClipTextEncoder`, the CLIP BPE `SDTokenizer`) or "t5" (T5 encoders: `T5Config`, `T5TextEncoder`,
`T5XXLTokenizer`) or "umt5" (Wan's umT5: `T5Config` with a table per block, `umt5.UMT5XXlModel`,
`umt5_tokenizer.UMT5XXlTokenizer` over the file's own SentencePiece model, given as ComfyUI's
`tokenizer_data`) or "qwen3" (Qwen3 decoders used as encoders, Z-Image's Qwen3-4B:
`qwen3.Qwen3Config`, `qwen3.Qwen3TextEncoder`, `qwen_tokenizer.QwenTokenizer` over the shipped
Qwen vocabulary; kept in the file's dtype, as ComfyUI keeps its LLM encoders) or "qwen25vl"
(Qwen2.5-VL language models with their vision tower, Qwen-Image's Qwen2.5-VL-7B:
`qwen25vl.Qwen25VLConfig`, `qwen25vl.Qwen25VLTextEncoder`, the same Qwen tokenizer; kept in the
file's dtype too) or "qwen3vl" (Qwen3-VL with its vision tower and DeepStack, Qwen-Image 2.1's and
Flux 3's: `qwen3vl.Qwen3VLConfig`, `qwen3vl.Qwen3VLTextEncoder`, the Qwen tokenizer; int8 / ConvRot
layers kept int8). The LLM towers also read ComfyUI's scaled-fp8 / float8 files (fp8 weights kept,
computed with their scales: `decoder_llm.convert_weights`) and, through `gguf_files`, llama.cpp's
GGUF quantisations (weights kept quantised: `weights.gguf.GGUFLinear`). The factory and the
split-file loader go through these functions, so an encoder set mixing CLIP and T5 towers (SD3,
Flux) is built like a CLIP-only one.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.config import ClipTextConfig
from comfy_core.text_encoders.encoder_set import EncoderOptions
from comfy_core.text_encoders.t5_config import T5Config, T5DetectionError

KIND_CLIP = "clip"
KIND_T5 = "t5"
KIND_UMT5 = "umt5"
KIND_QWEN3 = "qwen3"
KIND_QWEN25VL = "qwen25vl"
KIND_QWEN3VL = "qwen3vl"  # Qwen3-VL with its vision tower (Qwen-Image 2.1, Flux 3): qwen3vl.py, the Qwen tokenizer
KIND_LLAMA = "llama"  # Llama 3 decoders used as encoders (HiDream's Llama 3.1 8B): llama.py, llama_tokenizer.py
KIND_MISTRAL = "mistral"  # Mistral Small 3 (Flux.2 dev's), Ministral 3 3B (ERNIE-Image's): mistral.py, tekken_tokenizer.py
KIND_GEMMA2 = "gemma2"  # Gemma 2 decoders used as encoders (Lumina 2's Gemma 2 2B): gemma.py, gemma_tokenizer.py
KIND_QWEN35 = "qwen35"  # Qwen3.5 (hybrid Gated DeltaNet / attention): qwen35.py, its vocabulary from the user
KIND_BYT5 = "byt5"  # ByT5 (a T5 encoder on UTF-8 bytes; HunyuanVideo 1.5's glyph encoder): byt5_tokenizer.py
KIND_T5GEMMA = "t5gemma"  # T5Gemma encoders (Stable Audio 3's t5gemma-b-b-ul2): t5gemma.py, t5gemma_clip.py
KIND_GEMMA3 = "gemma3"  # Gemma 3 decoders used as encoders (NewBie's Gemma 3 4B): gemma3.py, gemma_tokenizer.py
KIND_JINA = "jina_clip_2"  # Jina CLIP v2's XLM-RoBERTa text tower (NewBie's pooled text): jina_clip2.py
FP8_STORAGE = ("F8_E4M3", "F8_E5M2", "torch.float8_e4m3fn", "torch.float8_e5m2")


def detect_tower(tensors: Mapping[str, Any], prefix: str, options: EncoderOptions) -> Any:
    """The config of the `options.kind` tower under `prefix` (None when none is there)."""
    if options.kind in (KIND_GEMMA3, KIND_JINA):
        import dataclasses

        if options.kind == KIND_GEMMA3:
            from comfy_core.text_encoders.gemma3 import Gemma3Config as TowerConfig
        else:
            from comfy_core.text_encoders.jina_clip2 import JinaConfig as TowerConfig  # type: ignore[assignment]
        found = TowerConfig.detect_from_weights(tensors, prefix)
        return None if found is None else dataclasses.replace(found, slot=options.slot)
    if options.kind == KIND_QWEN35:
        import dataclasses

        from comfy_core.text_encoders.qwen35 import Qwen35Config

        found = Qwen35Config.detect_from_weights(tensors, prefix)
        return found if found is None or found.slot == options.slot else dataclasses.replace(found, slot=options.slot)
    if options.kind in (KIND_QWEN3, KIND_QWEN25VL, KIND_QWEN3VL, KIND_LLAMA, KIND_GEMMA2, KIND_MISTRAL):
        if options.kind == KIND_QWEN3VL:
            from comfy_core.text_encoders.qwen3vl import Qwen3VLConfig as LLMConfig
        elif options.kind == KIND_QWEN3:
            from comfy_core.text_encoders.qwen3 import Qwen3Config as LLMConfig
        elif options.kind == KIND_LLAMA:
            from comfy_core.text_encoders.llama import LlamaConfig as LLMConfig
        elif options.kind == KIND_MISTRAL:
            from comfy_core.text_encoders.mistral import MistralConfig as LLMConfig
        elif options.kind == KIND_GEMMA2:
            from comfy_core.text_encoders.gemma import GemmaConfig as LLMConfig
        else:
            from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig as LLMConfig

        config = LLMConfig.detect_from_weights(tensors, prefix)
        if config is not None and config.slot != options.slot:
            import dataclasses

            config = dataclasses.replace(config, slot=options.slot)
        return config
    if options.kind == KIND_T5GEMMA:
        import dataclasses

        from comfy_core.text_encoders.t5gemma import T5GemmaConfig

        found = T5GemmaConfig.detect_from_weights(tensors, prefix)
        return None if found is None else dataclasses.replace(found, slot=options.slot)
    if options.kind in (KIND_T5, KIND_UMT5):
        config = T5Config.detect_from_weights(tensors, prefix)
        if config is not None and config.relative_attention_per_block != (options.kind == KIND_UMT5):
            raise T5DetectionError(
                f"{prefix or 'the file'}: a {'umT5' if config.relative_attention_per_block else 'T5'} encoder "
                f"where the {options.slot} slot needs a {'umT5' if options.kind == KIND_UMT5 else 'T5'} one "
                "(umT5 has a relative_attention_bias in every block, T5 only in block 0)")
        if config is not None and config.slot != options.slot:
            import dataclasses

            config = dataclasses.replace(config, slot=options.slot)
        return config
    return ClipTextConfig.detect_from_weights(tensors, prefix, slot=options.slot)


def reads_as_stored(config: Any) -> bool:
    """Whether a loader reads this tower's tensors as the file stores them, without a cast (see
    `build_tower`): Qwen3 always (ComfyUI's `dtype_llama`, the file's dtype), T5 / umT5 when the
    file holds fp8 or scaled-fp8 weights. One rule for checkpoints and text-encoder files alike."""
    from comfy_core.text_encoders.gemma import GemmaConfig
    from comfy_core.text_encoders.llama import LlamaConfig
    from comfy_core.text_encoders.qwen3 import Qwen3Config
    from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig
    from comfy_core.text_encoders.qwen35 import Qwen35Config

    return isinstance(config, (Qwen3Config, Qwen25VLConfig, LlamaConfig, GemmaConfig, Qwen35Config)) \
        or isinstance(config, T5Config) and (config.fp8 or config.scaled_fp8)


def build_tower(config: Any, state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """The encoder module of a detected tower. T5 files stored in fp8 stay fp8 (cast per layer as
    they run, as ComfyUI keeps `dtype_t5`): an fp8 T5-XXL is 5 GB, 19 GB in float32. Qwen3 towers
    keep every tensor as given (ComfyUI's `dtype_llama`, the file's dtype); they compute in float32."""
    from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder
    from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig
    from comfy_core.text_encoders.qwen25vl_load import build_qwen25vl_encoder

    from comfy_core.text_encoders.llama import LlamaConfig, build_llama_encoder

    from comfy_core.text_encoders.qwen3vl import Qwen3VLConfig, build_qwen3vl_encoder
    from comfy_core.text_encoders.t5gemma import T5GemmaConfig

    if isinstance(config, T5GemmaConfig):
        from comfy_core.text_encoders.t5gemma_clip import build_t5gemma_clip

        return build_t5gemma_clip(config, state_dict, dtype)
    if isinstance(config, Qwen3VLConfig):  # before Qwen3: a Qwen3VLConfig is a Qwen3Config
        return build_qwen3vl_encoder(config, state_dict, None)
    if isinstance(config, Qwen3Config):
        return build_qwen3_encoder(config, state_dict, None)
    from comfy_core.text_encoders.qwen35 import Qwen35Config
    from comfy_core.text_encoders.qwen35_load import build_qwen35_encoder

    if isinstance(config, Qwen35Config):
        return build_qwen35_encoder(config, state_dict, None)
    from comfy_core.text_encoders.mistral import MistralConfig, build_mistral_encoder

    if isinstance(config, MistralConfig):  # before Llama: a MistralConfig is a LlamaConfig
        return build_mistral_encoder(config, state_dict, None)
    if isinstance(config, LlamaConfig):
        return build_llama_encoder(config, state_dict, None)
    from comfy_core.text_encoders.gemma import GemmaConfig, build_gemma_encoder
    from comfy_core.text_encoders.gemma3 import Gemma3Config, build_gemma3_encoder
    from comfy_core.text_encoders.jina_clip2 import JinaConfig, build_jina_encoder

    if isinstance(config, JinaConfig):
        return build_jina_encoder(config, state_dict, dtype)
    if isinstance(config, Gemma3Config):  # before Gemma 2: a Gemma3Config is a GemmaConfig
        return build_gemma3_encoder(config, state_dict, None)
    if isinstance(config, GemmaConfig):
        return build_gemma_encoder(config, state_dict, None)
    if isinstance(config, Qwen25VLConfig):
        return build_qwen25vl_encoder(config, state_dict, None)
    if isinstance(config, T5Config):
        stored = None if str(config.dtype) in FP8_STORAGE else dtype
        if config.relative_attention_per_block:
            from comfy_core.text_encoders.umt5 import build_umt5_encoder

            return build_umt5_encoder(config, state_dict, stored)
        from comfy_core.text_encoders.t5 import build_t5_encoder

        return build_t5_encoder(config, state_dict, stored)
    from comfy_core.text_encoders.encoder import build_encoder

    return build_encoder(config, state_dict, dtype)


def tower_tokenizer(options: EncoderOptions, config: Any, clip_tokenizer: Any, embedding_key: str,
                    tokenizer_data: Mapping[str, Any] | None = None) -> Any:
    """The tokenizer of one tower of a set (see `comfy_core.text_encoders.factory.make_tokenizer`).
    `tokenizer_data`: ComfyUI's, what a tower's file carries for its tokenizer (umT5's
    `spiece_model`); a umT5 tower without it is a `MissingTokenizerError`."""
    if options.kind == KIND_QWEN35:
        from comfy_core.text_encoders.qwen35_tokenizer import qwen35_tokenizer

        return qwen35_tokenizer(options, config, tokenizer_data)
    if options.kind in (KIND_QWEN3, KIND_QWEN25VL, KIND_QWEN3VL):
        from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer

        return QwenTokenizer(options.token_key, config.width, min_length=options.min_length,
                             pad_token=options.pad_token)
    if options.kind == KIND_LLAMA:
        from comfy_core.text_encoders.llama_tokenizer import LlamaTokenizer

        return LlamaTokenizer(options.token_key, config.width, min_length=options.min_length,
                              pad_token=options.pad_token)
    if options.kind == KIND_MISTRAL:
        from comfy_core.text_encoders.tekken_tokenizer import mistral_tokenizer

        return mistral_tokenizer(tokenizer_data, embedding_width=config.width, min_length=options.min_length,
                                 pad_token=options.pad_token, source=f"the {options.slot} text encoder",
                                 embedding_key=options.token_key)
    if options.kind == KIND_GEMMA3:  # ComfyUI's Gemma3_4BTokenizer: Gemma's, prompt weights not parsed
        from comfy_core.text_encoders.gemma_tokenizer import gemma_tokenizer

        tokenizer = gemma_tokenizer(tokenizer_data, embedding_width=config.width, min_length=options.min_length,
                                    pad_token=options.pad_token, embedding_key=options.token_key,
                                    source=f"the {options.slot} text encoder")
        tokenizer.disable_weights = True
        return tokenizer
    if options.kind == KIND_JINA:  # its own file's model, beside another tower's (`jina_spiece_model`)
        from comfy_core.text_encoders.jina_clip2 import JINA_SPIECE_KEY, jina_tokenizer

        data = dict(tokenizer_data or {})
        if JINA_SPIECE_KEY in data:
            data["spiece_model"] = data[JINA_SPIECE_KEY]
        return jina_tokenizer(data, embedding_width=config.width, min_length=options.min_length,
                              pad_token=options.pad_token, embedding_key=options.token_key)
    if options.kind == KIND_GEMMA2:
        from comfy_core.text_encoders.gemma_tokenizer import gemma_tokenizer

        return gemma_tokenizer(tokenizer_data, embedding_width=config.width, min_length=options.min_length,
                               pad_token=options.pad_token, embedding_key=options.token_key,
                               source=f"the {options.slot} text encoder")
    if options.kind == KIND_T5GEMMA:
        from comfy_core.text_encoders.t5gemma_clip import t5gemma_tokenizer

        return t5gemma_tokenizer(tokenizer_data, embedding_width=config.width, min_length=options.min_length,
                                 pad_token=options.pad_token, embedding_key=options.token_key,
                                 source=f"the {options.slot} text encoder")
    if options.kind == KIND_UMT5:
        from comfy_core.text_encoders.umt5_tokenizer import umt5_tokenizer

        return umt5_tokenizer(tokenizer_data, min_length=options.min_length, embedding_width=config.width,
                              source=f"the {options.slot} text encoder")
    if options.kind == KIND_BYT5:
        from comfy_core.text_encoders.byt5_tokenizer import ByT5Tokenizer

        return ByT5Tokenizer(min_length=options.min_length, embedding_width=config.width)
    if options.kind == KIND_T5:
        from comfy_core.text_encoders.t5_tokenizer import T5XXLTokenizer

        return T5XXLTokenizer(min_length=options.min_length, embedding_width=config.width)
    from comfy_core.text_encoders.sd_tokenizer import SDTokenizer, TokenizerSpec

    return SDTokenizer(clip_tokenizer, TokenizerSpec(
        key=options.token_key, pad_token=options.pad_token, embedding_width=config.width,
        embedding_key=embedding_key, max_length=min(77, config.max_positions)))
