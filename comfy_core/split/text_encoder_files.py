"""`load_text_encoders`: text-encoder files -> CLIP (ComfyUI's CLIPLoader / DualCLIPLoader).

After ComfyUI's `comfy/sd.py: load_text_encoder_state_dicts`. Each file holds one CLIP text tower,
in transformers' layout (`text_model.*`, optionally `text_projection.weight`; what ComfyUI's
models/text_encoders files and its CLIPSave hold) or OpenCLIP's (`transformer.resblocks.*`,
`ln_final.*`, `text_projection`). Which tower it is comes from its depth, ComfyUI's rule
(`detect_te_model`): a 31st layer means OpenCLIP-bigG (32 layers), a 23rd OpenCLIP-H (24),
otherwise OpenAI CLIP-L (12); the activation follows (quick-GELU for OpenAI's CLIP-L, GELU for the
OpenCLIP towers). The towers found form the encoder set of their family (CLIP-L: SD1, OpenCLIP-H:
SD2, bigG: SDXL refiner, CLIP-L + bigG: SDXL), built exactly as a checkpoint's encoders are
(`comfy_core.text_encoders`), so the same weights give the same conditioning bit for bit.

T5 files (`encoder.block.N...`, `shared.weight`) are a `t5xxl` tower, or, with a
relative-attention table in every block, Wan's `umt5xxl` (ComfyUI's `umt5_xxl_*.safetensors`; the
original Wan-AI layout `blocks.N.attn.q.weight`... is renamed, `comfy_core.text_encoders.umt5_keys`).
A umT5 tokenizer is the file's own `spiece_model` tensor, passed on as ComfyUI's `tokenizer_data`
(ComfyUI's `load_text_encoder_state_dicts` does so for CLIPType.WAN); a umT5 file without one is refused
before its weights are read (`MissingTokenizerError`).

Qwen3 files (`model.layers.N.self_attn.q_norm.weight`..., ComfyUI's `qwen_3_4b.safetensors` and
the Hugging Face layout) are a Qwen3 tower (`comfy_core.text_encoders.qwen3`), slot `qwen3_4b` for
Z-Image (CLIPLoader type "lumina2"), kept in the file's dtype as ComfyUI keeps its LLM encoders.
Qwen2.5-VL files (biased `model.layers.N.self_attn.k_proj`, no q_norm, with `visual.*`: ComfyUI's
`qwen_2.5_vl_7b*.safetensors`) are a Qwen2.5-VL tower (`comfy_core.text_encoders.qwen25vl`), slot
`qwen25_7b` for Qwen-Image (CLIPLoader type "qwen_image"), kept in the file's dtype too.
Qwen3-VL files (`model.visual.deepstack_merger_list.0.norm.weight`, transformers' layout: ComfyUI's
`qwen3vl_{4b,8b}*.safetensors`) are a Qwen3-VL tower (`comfy_core.text_encoders.qwen3vl`), slot
`qwen3vl_4b` / `qwen3vl_8b`, for Qwen-Image 2.1 (type "qwen_image") and Flux 3 (type "flux3"), their
int8 / ConvRot layers kept int8.
Gemma 2 files (`model.layers.N.post_feedforward_layernorm.weight`, no q_norm: ComfyUI's
`gemma_2_2b_fp16.safetensors`) are a Gemma 2 tower (`comfy_core.text_encoders.gemma`), slot
`gemma2_2b` for Lumina 2 (CLIPLoader type "lumina2", which a Qwen3-4B file under the same type
turns into Z-Image's set), its tokenizer the file's own `spiece_model` as for umT5.
Mistral Small 3 files (the Llama layout, told apart from Llama 3.1 by their `tekken_model` tensor,
5120 width or 131072-token table: ComfyUI's `mistral_3_small_flux2_*.safetensors`) are a Mistral
tower (`comfy_core.text_encoders.mistral`), slot `mistral3_24b` for Flux.2 dev (CLIPLoader type
"flux2"), its tokenizer the file's own `tekken_model` (`tekken_tokenizer.py`).
Qwen3.5 files (`model.language_model.layers.N.linear_attn.A_log`: Comfy-Org's `qwen3.5_*.safetensors`)
are a Qwen3.5 tower (`comfy_core.text_encoders.qwen35`); one such file gives ComfyUI's Qwen3.5
encoder whatever the type (as ComfyUI's loader does), its vocabulary read from `qwen35_tokenizer/`
beside the file (`qwen35_tokenizer.py`: not shipped here), its quantisation descriptions read
before its shapes, so an int4 file is refused by its format's name.
Gemma 4 files (`model.layers.0.layer_scalar`: Comfy-Org's `gemma4_*`) are a Gemma 4 tower
(`comfy_core.text_encoders.gemma4_load`, its tokenizer the file's own `tokenizer_json`) whatever
the type, as ComfyUI's loader builds them; a file an encoder set loads whole (`EncoderSetSpec.
whole_files`: LTX-2.5's Gemma 4 12B with LTX's text projection) is its family's, any type too.
GGUF files of these LLM towers (llama.cpp's names and quantisations, what ComfyUI-GGUF's
CLIPLoaderGGUF reads) open through `comfy_core.text_encoders.gguf_files` under the same names, their
quantised weights kept quantised; a `_quantization_metadata` header entry (today's ComfyUI's
per-layer quantisation) is served as the `<layer>.comfy_quant` tensors the towers read.
"""
from __future__ import annotations

import dataclasses
import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch

from comfy_core.checkpoint.bulk import BulkRead
from comfy_core.checkpoint.dtype import TEXT
from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.materialize import stored_requests, tensor_requests
from comfy_core.checkpoint.reader import CheckpointFile, LazyStateDict
from comfy_core.loading import LoadOptions
from comfy_core.split.clip_types import ClipFilesError, UnsupportedClipTypeError, sets_for_type
from comfy_core.text_encoders import CLIP, ClipTextConfig, TextEncoderError, TextEncoderSet, make_tokenizer
from comfy_core.families import FamilyRegistry, default_registry
from comfy_core.text_encoders.decoder_llm import with_quantization_metadata
from comfy_core.text_encoders.gemma import GemmaConfig
from comfy_core.text_encoders.gemma3 import Gemma3Config
from comfy_core.text_encoders.gemma_tokenizer import MissingGemmaTokenizerError
from comfy_core.text_encoders.jina_clip2 import JINA_SPIECE_KEY, JinaConfig
from comfy_core.text_encoders.gguf_files import GGUFTextEncoderFile, is_gguf
from comfy_core.text_encoders.llama import LlamaConfig
from comfy_core.text_encoders.mistral import MistralConfig
from comfy_core.text_encoders.tekken_tokenizer import TEKKEN_KEY, MissingTekkenError
from comfy_core.text_encoders.qwen3 import Qwen3Config
from comfy_core.text_encoders.qwen3vl import Qwen3VLConfig
from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig
from comfy_core.text_encoders import qwen35, qwen35_load, qwen35_tokenizer
from comfy_core.text_encoders.qwen35 import SLOT_NAMES as QWEN35_NAMES, Qwen35Config
from comfy_core.text_encoders.t5_config import T5Config
from comfy_core.text_encoders.t5gemma import T5GemmaConfig
from comfy_core.text_encoders.towers import build_tower, reads_as_stored
from comfy_core.text_encoders.umt5_keys import RenamedMapping, is_wan_layout
from comfy_core.text_encoders.umt5_tokenizer import SPIECE_KEY, MissingTokenizerError

log = logging.getLogger(__name__)

HF_PREFIX = "text_model."
# ComfyUI's depth rule: these layer indices exist only in the deeper towers.
BIGG_LAYER = 30
H_LAYER = 22
SLOT_NAMES = {"clip_l": "CLIP-L", "clip_h": "OpenCLIP-H", "clip_g": "OpenCLIP-bigG", "t5xxl": "T5-XXL",
              "umt5xxl": "umT5-XXL", "qwen3_06b": "Qwen3-0.6B", "qwen3_2b": "Qwen3-2B", "qwen3_4b": "Qwen3-4B",
              "qwen3_8b": "Qwen3-8B", "qwen25_3b": "Qwen2.5-VL-3B", "qwen25_7b": "Qwen2.5-VL-7B",
              "qwen3vl_4b": "Qwen3-VL-4B", "qwen3vl_8b": "Qwen3-VL-8B",
              "llama": "Llama-3.1-8B", "mistral3_24b": "Mistral-Small-3-24B", "ministral3_3b": "Ministral-3-3B",
              "gemma2_2b": "Gemma-2-2B", "gemma3_4b": "Gemma-3-4B", "gemma3_12b": "Gemma-3-12B",
              "jina_clip_2": "Jina-CLIP-v2",
              "t5gemma": "T5Gemma", "gpt_oss": "GPT-OSS-20B",
              **QWEN35_NAMES}
# Key names of text encoders that are not CLIP towers, for a clearer refusal.
_OTHER_ENCODERS = (("encoder.block.0.layer.0.SelfAttention.k.weight", "a T5-style encoder of another layout"),
                   ("model.layers.0.self_attn.k_proj.weight", "a decoder-only language model (Llama, Qwen, Gemma)"))


def slot_for_depth(layers: int) -> str:
    """"clip_g", "clip_h" or "clip_l" from a tower's layer count (ComfyUI's `detect_te_model`)."""
    if layers > BIGG_LAYER:
        return "clip_g"
    if layers > H_LAYER:
        return "clip_h"
    return "clip_l"


class _OldProjection(Mapping[str, torch.Tensor]):
    """A state dict whose transformers-layout file stores the projection as ComfyUI's old CLIPSave
    did, as the matrix `text_projection` [width, proj]: served as `text_projection.weight`
    (its transpose), as ComfyUI's loader converts it."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self._state = state

    def __getitem__(self, name: str) -> torch.Tensor:
        if name == "text_projection.weight":
            return self._state["text_projection"].t().contiguous()
        return self._state[name]

    def __iter__(self) -> Iterator[str]:
        for name in self._state:
            yield "text_projection.weight" if name == "text_projection" else name

    def __len__(self) -> int:
        return len(self._state)


def _true_shapes(checkpoint: CheckpointFile, tensors: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Qwen3-VL file's header with its quantised weights at their true shapes (NVFP4 packs two
    values a byte: MiniMax H3's `*_nvfp4_awq`), as qwen35_load's detection reads its own."""
    from comfy_core.text_encoders.qwen3vl import is_qwen3vl
    from comfy_core.weights.quant_registry import QuantizedHeader, quantized_layers

    if not is_qwen3vl(tensors, "") or not any(name.endswith(".comfy_quant") for name in tensors):
        return tensors
    layers = quantized_layers(tensors, getattr(checkpoint, "metadata", None) or {},
                              lambda name: checkpoint.read(name, None))
    return QuantizedHeader.for_detection(checkpoint, layers).tensors if layers else tensors


def text_encoder_config(checkpoint: CheckpointFile) -> Any:
    """The tower one text-encoder file holds (names and shapes only; see the module docstring):
    a `ClipTextConfig`, or a `T5Config` (slot `t5xxl`, or `umt5xxl` for umT5) for a T5 encoder file."""
    tensors = _named(checkpoint.tensors)
    try:
        qwen35_config = qwen35_load.detect_in_file(checkpoint, tensors)
        if qwen35_config is not None:
            return qwen35_config
        t5gemma = T5GemmaConfig.detect_from_weights(tensors)  # Stable Audio 3's (model.encoder. / encoder.)
        if t5gemma is not None:
            return t5gemma
        t5 = T5Config.detect_from_weights(tensors, "")
        qwen3vl = Qwen3VLConfig.detect_from_weights(_true_shapes(checkpoint, tensors), "") \
            if t5 is None else None  # before Qwen3 (its LM)
        if qwen3vl is not None:
            return qwen3vl
        qwen3 = Qwen3Config.detect_from_weights(tensors, "") if t5 is None else None
        qwen25 = Qwen25VLConfig.detect_from_weights(tensors, "") if t5 is None and qwen3 is None else None
        llama = (MistralConfig.detect_from_weights(tensors, "") or LlamaConfig.detect_from_weights(tensors, "")) \
            if t5 is None and qwen3 is None and qwen25 is None else None  # Mistral first: it is Llama-shaped
        gemma = GemmaConfig.detect_from_weights(tensors, "") \
            if t5 is None and qwen3 is None and qwen25 is None and llama is None else None
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if t5 is not None:
        return t5
    if qwen3 is not None:
        return qwen3
    if qwen25 is not None:
        return qwen25
    if llama is not None:
        return llama
    if gemma is not None:
        return gemma
    try:  # NewBie's towers (DualCLIPLoader type "newbie"): Gemma 3 (q/k norms), Jina CLIP v2
        gemma3 = Gemma3Config.detect_from_weights(tensors, "")
        jina = JinaConfig.detect_from_weights(tensors, "") if gemma3 is None else None
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if gemma3 is not None:
        return dataclasses.replace(gemma3, slot="gemma3_12b" if gemma3.hidden_size == 3840 else "gemma3_4b")
    if jina is not None:
        return jina
    try:
        if f"{HF_PREFIX}final_layer_norm.weight" in tensors:
            config = ClipTextConfig.detect_from_weights(tensors, HF_PREFIX, slot="clip_l")
        elif "ln_final.weight" in tensors and "token_embedding.weight" in tensors:
            config = ClipTextConfig.detect_from_weights(tensors, "", slot="clip_l")
        else:
            config = None
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if config is None:
        what = next((kind for key, kind in _OTHER_ENCODERS if key in tensors), None)
        raise ClipFilesError(f"{checkpoint.path}: " + (
            f"holds {what}, which this engine cannot load (only CLIP text encoders: CLIP-L, OpenCLIP-H, "
            "OpenCLIP-bigG, T5 encoders, Qwen3, Qwen2.5-VL, Qwen3-VL, Llama 3 and Gemma 2)" if what else
            "not a CLIP text encoder (no 'text_model.final_layer_norm.weight' nor OpenCLIP's 'ln_final.weight')"))
    slot = slot_for_depth(config.layers)
    config = dataclasses.replace(config, slot=slot, activation="quick_gelu" if slot == "clip_l" else "gelu")
    if config.prefix == HF_PREFIX and not config.has_projection and "text_projection" in tensors:
        _width, projection = (int(d) for d in tensors["text_projection"].shape)
        config = dataclasses.replace(config, has_projection=True, projection_dim=projection)
    return config


def _is_qwen35(path: Any) -> bool:
    """Whether `path` is a readable safetensors file holding a Qwen3.5 model (False on any failure)."""
    if not isinstance(path, (str, Path)) or is_gguf(path):
        return False
    try:
        with CheckpointFile(path) as checkpoint:
            return qwen35.holds_qwen35(checkpoint.tensors)
    except Exception:  # an unreadable file: the type's own refusal stands
        return False


def _is_gemma4(path: Any) -> bool:
    """Whether `path` is a readable safetensors file holding a Gemma 4 text model (False on any failure)."""
    from comfy_core.text_encoders.gemma4_load import holds_gemma4

    if not isinstance(path, (str, Path)) or is_gguf(path):
        return False
    try:
        with CheckpointFile(path) as checkpoint:
            return holds_gemma4(checkpoint.tensors)
    except Exception:  # an unreadable file: the generic path reports it
        return False


def _whole_file_loader(path: Any, sets: Sequence[Any]) -> Any:
    """The loader of the first encoder set that loads this file whole (`EncoderSetSpec.whole_files`),
    None when none does or the file is not a readable safetensors file."""
    matchers = [pair for spec in sets for pair in getattr(spec, "whole_files", ())]
    if not matchers or not isinstance(path, (str, Path)) or is_gguf(path):
        return None
    try:
        with CheckpointFile(path) as checkpoint:
            tensors = checkpoint.tensors
    except Exception:  # an unreadable file: the generic path reports it
        return None
    return next((load for match, load in matchers if match(tensors)), None)


def _named(tensors: Mapping[str, Any]) -> Mapping[str, Any]:
    """A file's tensors (or header) under ComfyUI's names: Wan's own umT5 layout renamed."""
    return RenamedMapping(tensors) if is_wan_layout(tensors) else tensors


def load_text_encoders(paths: Sequence[str | Path | Mapping[str, torch.Tensor]], clip_type: str = "stable_diffusion",
                       options: LoadOptions | None = None, *, load_device: str | None = None,
                       offload_device: str = "cpu", registry: FamilyRegistry | None = None,
                       tokenizer_data: Mapping[str, Any] | None = None) -> CLIP:
    """Text-encoder files -> a CLIP object of the encoder set they form.

    `clip_type`: CLIPLoader's / DualCLIPLoader's type (TripleCLIPLoader: "sd3"); the registry's
    encoder sets say which types they answer (`EncoderSetSpec.clip_types`); a type of a family we
    do not have raises `UnsupportedClipTypeError` before any file is read. Raises
    `ClipFilesError` when the files do not form an encoder set of that type, `CheckpointError`
    subclasses for unreadable files. `tokenizer_data`: ComfyUI's, for files that carry no
    tokenizer of their own (`{"spiece_model": bytes or uint8 tensor}` for Wan-AI's umT5 `.pth`,
    e.g. google/umt5-xxl's `spiece.model`); a file's own tokenizer takes precedence.
    """
    if len(paths) == 1:  # a file a family loads whole (LTX-2.5's Gemma 4 with its projection), any type
        whole = _whole_file_loader(paths[0], (registry or default_registry()).encoder_sets())
        if whole is not None:
            load_options = options or LoadOptions()
            return whole(paths[0], load_options.dtype_policy.dtype_for(TEXT), load_device or load_options.device,
                         offload_device)
    if len(paths) == 1 and _is_gemma4(paths[0]):  # ComfyUI builds its Gemma 4 encoders whatever the type
        from comfy_core.text_encoders.gemma4_load import load_gemma4_clip

        load_options = options or LoadOptions()
        return load_gemma4_clip(paths[0], load_options.dtype_policy.dtype_for(TEXT),
                                load_device or load_options.device, offload_device)
    try:
        candidates = sets_for_type(clip_type, (registry or default_registry()).encoder_sets())
        unsupported = None
    except UnsupportedClipTypeError as exc:  # unless the file is a Qwen3.5 (any type, below)
        if len(paths) != 1 or not _is_qwen35(paths[0]):
            raise
        candidates, unsupported = [], exc
    options = options or LoadOptions()
    if not paths:
        raise ClipFilesError("no text-encoder file given")
    dtype = options.dtype_policy.dtype_for(TEXT)
    with ExitStack() as stack:
        # GGUF encoders (llama.cpp's quantisations, ComfyUI-GGUF's CLIPLoaderGGUF files) open as our names.
        files = [stack.enter_context(GGUFTextEncoderFile(p) if is_gguf(p) else CheckpointFile(p)) for p in paths]
        configs = [text_encoder_config(f) for f in files]
        if len(configs) == 1 and isinstance(configs[0], Qwen35Config):
            # ComfyUI builds its Qwen3.5 encoder for one Qwen3.5 file whatever the type.
            candidates = [qwen35_tokenizer.encoder_set(configs[0].slot)]
        elif unsupported is not None:
            raise unsupported
        slots = [c.slot for c in configs]
        spec = next((c for c in candidates if {o.slot for o in c.encoders} == set(slots)), None) \
            or next((c for c in candidates if c.fits(slots)), None)
        if len(set(slots)) != len(slots) or spec is None:
            wanted = " or ".join("+".join(SLOT_NAMES[o.slot] for o in c.encoders) + (" (any of them)" if c.partial else "")
                                 for c in candidates)
            raise ClipFilesError(
                f"text encoder type {clip_type!r}: the files hold "
                f"{', '.join(f'{f.path.name}: {SLOT_NAMES[c.slot]} ({c.layers} layers)' for f, c in zip(files, configs))}"
                f"; {clip_type} needs {wanted}" + ("" if len(set(slots)) == len(slots) else
                                                  "; each file must hold a different tower"))
        given = dict(tokenizer_data or {})
        tokenizer_data = dict(given)
        for checkpoint, config in zip(files, configs):
            if isinstance(config, Qwen35Config) and qwen35.TOKENIZER_KEY not in given:
                # Qwen3.5's vocabulary is not shipped: `qwen35_tokenizer/` beside the file (qwen35.py).
                tokenizer_data[qwen35.TOKENIZER_KEY] = qwen35_tokenizer.find_tokenizer(checkpoint.path)
        for checkpoint, config in zip(files, configs):
            if isinstance(config, T5Config) and config.relative_attention_per_block:
                if SPIECE_KEY in checkpoint.tensors:
                    tokenizer_data[SPIECE_KEY] = checkpoint.read(SPIECE_KEY, None)
                elif SPIECE_KEY not in given:
                    raise MissingTokenizerError(str(checkpoint.path))
            if isinstance(config, MistralConfig):
                if TEKKEN_KEY in checkpoint.tensors:
                    tokenizer_data[TEKKEN_KEY] = checkpoint.read(TEKKEN_KEY, None)
                elif TEKKEN_KEY not in given:
                    raise MissingTekkenError(str(checkpoint.path))
            if isinstance(config, JinaConfig) and SPIECE_KEY in checkpoint.tensors:
                tokenizer_data[JINA_SPIECE_KEY] = checkpoint.read(SPIECE_KEY, None)
            if isinstance(config, (GemmaConfig, T5GemmaConfig)):
                if SPIECE_KEY in checkpoint.tensors:
                    tokenizer_data[SPIECE_KEY] = checkpoint.read(SPIECE_KEY, None)
                elif SPIECE_KEY not in given:
                    raise MissingGemmaTokenizerError(str(checkpoint.path))
        encoders = {}
        for checkpoint, config in zip(files, configs):
            if isinstance(checkpoint, GGUFTextEncoderFile):  # quantised weights stay quantised (GGUFLinear)
                try:
                    encoders[config.slot] = build_tower(config, checkpoint.state_dict(), dtype)
                except TextEncoderError as exc:
                    raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
                continue
            # fp8 T5 and Qwen3 towers are read as stored (towers.reads_as_stored); the rest in the policy's dtype.
            stored = None if reads_as_stored(config) else dtype
            requests = stored_requests(checkpoint, config.prefix) if stored is None else \
                tensor_requests(checkpoint, config.prefix, stored)
            if config.prefix == HF_PREFIX:
                requests.update(tensor_requests(checkpoint, "text_projection", dtype))
            reading = stack.enter_context(BulkRead(checkpoint, requests, zero_copy=options.mmap,
                                                   workers=options.io_workers))
            state: Mapping[str, torch.Tensor] = LazyStateDict(checkpoint, stored, pending=reading)
            if config.prefix == HF_PREFIX and "text_projection" in checkpoint.tensors \
                    and "text_projection.weight" not in checkpoint.tensors:
                state = _OldProjection(state)
            state = _named(state)
            state = with_quantization_metadata(state, checkpoint.metadata, config.prefix)  # ComfyUI's per-layer form
            try:
                encoders[config.slot] = build_tower(config, state, dtype)
            except TextEncoderError as exc:
                raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    module = TextEncoderSet(spec, encoders)
    log.info("text encoders %s: %s (%s)", spec.name, ", ".join(f.path.name for f in files),
             ", ".join(f"{SLOT_NAMES[c.slot]} width {c.width} x{c.layers}" for c in configs))
    return CLIP.from_encoders(module, make_tokenizer(configs, spec=spec, tokenizer_data=tokenizer_data),
                              load_device or options.device, offload_device)
