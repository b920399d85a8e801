"""Gemma 4 files -> the tower and its tokenizer (ComfyUI's CLIPLoader on a Gemma 4 file,
`comfy/sd.py: load_text_encoder_state_dicts`, the `TEModel.GEMMA_4_*` branch; `gemma4.py`'s
`Gemma4SDTokenizer`); written here.

Files: Comfy-Org's `gemma4_e2b_it_*`, `gemma4_e4b_it_*` and `gemma4-12b-with-proj-ltx-2.5-*`
(transformers' text model under `model.`, `layers.N.layer_scalar` being ComfyUI's Gemma 4 mark;
besides the tower: the media embedders, for the 12B LTX's text projection, and the tokenizer). Their
quantisation (ComfyUI's per-layer `comfy_quant` descriptions or the `_quantization_metadata`
header: int8 ConvRot, fp8 scaled, NVFP4, `weights/quant_registry.py`) is read as the file is: each
quantised weight dequantised to the file's float dtype when read.

Tokenizer: the file's own `tokenizer_json` tensor (tokenizer.json's UTF-8 bytes as uint8, Gemma 4
ships no SentencePiece model), read with the `tokenizers` package; nothing is downloaded and no
vocabulary ships with this engine, so a Gemma 4 file without the tensor is refused
(`MissingGemma4TokenizerError`). As ComfyUI's `Gemma4SDTokenizer`: `<bos>` (2) first, no end
token, prompt weights off, one chunk, padded on the left to `min_length` (1) with `<pad>` (0); the
text is the raw prompt (`skip_template`, ComfyUI's default, and whenever it starts with `<|turn>`),
else ComfyUI's chat: `<|turn>system\\n{<|think|>\\n}{system}<turn|>\\n` when thinking or given a
system prompt, `<|turn>user\\n{prompt}<turn|>\\n<|turn>model\\n`, and for the 12B (the "unified"
tokenizer) a closed empty thought `<|channel>thought\\n<channel|>` when not thinking. Decoding keeps
the special tokens, turns a thought channel into `<think>...</think>`, then strips the remaining
turn / channel markers and `<eos>` (ComfyUI's `Gemma4SDTokenizer.decode`).
Images (E2B / E4B's vision encoder, `gemma4_vision.py`): each frame of an IMAGE input becomes one
`<|image><|image|><image|>` turn after the prompt (or takes the `<|image|>` a raw `<|turn>` prompt
spells, TextGenerateLTX2Prompt's), the `<|image|>` token replaced by an image item the tower turns
into soft tokens. Audio (E2B / E4B's conformer, `gemma4_audio.py`): the first clip's log-mel
features, `<|audio>` + `<|audio|>` x its token count + `<audio|>` after the images, the run replaced
by one audio item. Video (the vision encoder on frames, ComfyUI's): one frame a second of 24 fps
(`fps`), each `mm:ss <|image><|video|><image|>` after the prompt at 70 soft tokens, instead of the
images. The 12B ("gemma4_unified", `gemma4_media.py`): the same image / video turns and preparation,
its encoder-free image embedder in place of the vision encoder; its audio is raw 16 kHz frames of
640 samples (`<|audio|>` x min(ceil(samples / 640), 750), ComfyUI's `Gemma4UnifiedSDTokenizer`),
the audio item's data those frames, read by its audio projector.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.file_tokenizer import load_tokenizer_json
from comfy_core.text_encoders.gemma4 import (GEMMA4_SLOT, TOKENIZER_KEY, Gemma4Config, Gemma4DetectionError,
                                             Gemma4KeyError, build_gemma4_encoder)
from comfy_core.text_encoders.gemma4_vision import MAX_SOFT_TOKENS, VIDEO_SOFT_TOKENS
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

START_ID, PAD_ID = 2, 0
PROJECTION_MARK = "text_embedding_projection.video_aggregate_embed.weight"  # the 12B's LTX projection


class Gemma4FileError(TextEncoderError):
    """A Gemma 4 file that cannot be loaded (names the file and what is wrong)."""


class MissingGemma4TokenizerError(Gemma4FileError):
    """A Gemma 4 file without its tokenizer (the `tokenizer_json` tensor)."""

    def __init__(self, source: str) -> None:
        super().__init__(f"{source}: this Gemma 4 text encoder file has no tokenizer (no {TOKENIZER_KEY!r} tensor); "
                         "use Comfy-Org's repackaged gemma4 files, which carry it (no Gemma 4 vocabulary ships with "
                         "this engine or its packages)")


def holds_gemma4(tensors: Mapping[str, Any]) -> bool:
    """Whether a file's tensors (names only) are a Gemma 4 text model (ComfyUI's mark)."""
    return "model.layers.0.layer_scalar" in tensors and "model.layers.0.post_feedforward_layernorm.weight" in tensors


# --- the tokenizer ---

def backend_from_data(data: Any, source: str = TOKENIZER_KEY) -> Any:
    """A `tokenizers.Tokenizer` from tokenizer.json's bytes (a uint8 tensor, bytes or str)."""
    return load_tokenizer_json(data, Gemma4FileError, source)


class Gemma4Tokenizer:
    """ComfyUI's `Gemma4SDTokenizer` (see the module doc): one slot of a `FamilyTokenizer`."""

    def __init__(self, backend: Any, embedding_key: str = GEMMA4_SLOT, embedding_width: int = 2560,
                 min_length: int | None = 1, prime_empty_thought: bool = False, data: Any = None,
                 audio_frame: int = 0) -> None:
        from comfy_core.text_encoders.sd_tokenizer import TokenizerSpec

        self.backend = backend
        self.data = data
        self.prime_empty_thought = prime_empty_thought
        self.audio_frame = audio_frame  # the 12B's raw audio frame (640 samples); 0: E2B / E4B's log-mel
        self.spec = TokenizerSpec(key=embedding_key, pad_token=PAD_ID, embedding_width=embedding_width,
                                  embedding_key=embedding_key, max_length=99999999, min_length=min_length)
        # ComfyUI's SDTokenizer attributes, which packs read.
        self.start_token, self.end_token, self.pad_token = START_ID, None, PAD_ID
        self.pad_left, self.pad_with_end, self.pad_to_max_length = True, False, False
        self.min_length, self.max_length = min_length, 99999999
        self.embedding_key, self.embedding_size = embedding_key, embedding_width
        self.disable_weights = True

    @property
    def tokenizer(self) -> Any:
        return self.backend

    def with_embedding_lookup(self, lookup: Any) -> "Gemma4Tokenizer":
        return self  # weights and embeddings are off (ComfyUI's disable_weights)

    def state_dict(self) -> dict:
        """ComfyUI's `Gemma4_Tokenizer.state_dict`: the tokenizer.json bytes, so a saved CLIP keeps it."""
        return {} if self.data is None else {TOKENIZER_KEY: self.data}

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def chat(self, text: str, thinking: bool = False, system_prompt: str = "") -> str:
        """ComfyUI's Gemma 4 chat around `text` (see the module doc)."""
        think = "<|think|>\n" if thinking else ""
        system = f"<|turn>system\n{think}{system_prompt}<turn|>\n" if thinking or system_prompt else ""
        model_open = "<|channel>thought\n<channel|>" if self.prime_empty_thought and not thinking else ""
        return f"{system}<|turn>user\n{text}<turn|>\n<|turn>model\n{model_open}"

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> list[list[tuple]]:
        video = kwargs.get("video") is not None  # ComfyUI reads the video instead of the images then
        if video:
            step = max(1, round(float(kwargs.get("fps", 24))))  # one frame a second
            frames = self._frames(kwargs["video"], None)[::step]
        else:
            frames = self._frames(kwargs.get("image"), kwargs.get("images"))
        sound = self._audio(kwargs.get("audio"))
        skip = kwargs.get("skip_template", True) or text.startswith("<|turn>")
        if not skip:
            template = kwargs.get("llama_template")
            if template is None:  # ComfyUI's media after the prompt
                if frames and video:  # each second's frame after its mm:ss
                    text += "\n\n" + " ".join(f"{i // 60:02d}:{i % 60:02d} <|image><|video|><image|>"
                                               for i in range(len(frames))) + "\n\n"
                elif frames:
                    text += "\n\n" + "\n\n\n\n".join(["<|image><|image|><image|>"] * len(frames)) + "\n\n"
                if sound is not None:
                    text += "<|audio>" + "<|audio|>" * sound[2] + "<audio|>"
            text = template.format(text) if template is not None else \
                self.chat(text, bool(kwargs.get("thinking", False)), kwargs.get("system_prompt", "") or "")
        options = kwargs.get("tokenizer_options") or {}
        min_length = kwargs.get("min_length", options.get(f"{self.embedding_key}_min_length", self.min_length))
        ids: list[Any] = [START_ID] + self.encode(text)
        if frames:
            budget = int(kwargs.get("max_soft_tokens", VIDEO_SOFT_TOKENS if video else MAX_SOFT_TOKENS))
            ids = self._splice_images(ids, frames, budget, "<|video|>" if video else "<|image|>")
        if sound is not None:
            ids = self._splice(ids, "<|audio|>", [{"type": "audio", "data": sound[0], "mask": sound[1]}], "audio")
        chunk = [(token, 1.0, 1) for token in ids]
        chunk[0] = (START_ID, 1.0, 0)
        missing = max(0, int(min_length or 0) - len(chunk))
        chunk = [(PAD_ID, 1.0, 0)] * missing + chunk
        return [chunk if return_word_ids else [(t, w) for t, w, _ in chunk]]

    @staticmethod
    def _frames(image: Any, images: Any) -> list[torch.Tensor]:
        """The frames `[H, W, C]` of the IMAGE inputs (a batch is several images, as ComfyUI's)."""
        batches = ([image] if image is not None else []) + list(images or [])
        frames = []
        for batch in batches:
            if not isinstance(batch, torch.Tensor) or batch.dim() not in (3, 4):
                raise TokenizeError(f"gemma4: an image must be an IMAGE [B, H, W, C], got {type(batch).__name__}")
            frames.extend(batch if batch.dim() == 4 else batch[None])
        return frames

    def _audio(self, audio: Any) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """An AUDIO input -> (features [1, T, D], validity [1, T], soft-token count), None without
        one: log-mel frames (D 128, E2B / E4B's conformer) or the 12B's raw frames (D `audio_frame`)."""
        if audio is None:
            return None
        from comfy_core.text_encoders.gemma4_audio import log_mel, token_count
        from comfy_core.text_encoders.gemma4_media import audio_frames, audio_token_count

        try:
            waveform, rate = audio["waveform"], int(audio.get("sample_rate", 16000))
        except (TypeError, KeyError):
            raise TokenizeError("gemma4: audio must be an AUDIO {'waveform': [B, C, S], 'sample_rate': int}") from None
        waveform = waveform[0] if waveform.dim() == 3 else waveform  # the first clip, as ComfyUI's
        samples = waveform.shape[-1] if rate == 16000 else int(waveform.shape[-1] * 16000 / rate)
        if self.audio_frame:
            frames, mask = audio_frames(waveform, rate, self.audio_frame)
            return frames[None], mask[None], audio_token_count(samples, self.audio_frame)
        mel, mask = log_mel(waveform, rate)
        return mel[None], mask[None], token_count(samples)

    def _splice_images(self, ids: list[Any], frames: list[torch.Tensor], max_soft_tokens: int,
                       placeholder: str = "<|image|>") -> list[Any]:
        """The ids with each run of `placeholder` replaced by one image item (ComfyUI's placeholders)."""
        from comfy_core.text_encoders.gemma4_vision import prepare_image

        items = [{"type": "image", "data": prepare_image(frame, max_soft_tokens), "max_soft_tokens": max_soft_tokens}
                 for frame in frames]
        return self._splice(ids, placeholder, items, "image")

    def _splice(self, ids: list[Any], placeholder: str, items: list[dict], what: str) -> list[Any]:
        """The ids with each run of `placeholder` replaced by the next item (ComfyUI's placeholders)."""
        token_id = self.backend.token_to_id(placeholder)
        if token_id is None:
            raise TokenizeError(f"gemma4: this tokenizer has no {placeholder} token")
        out: list[Any] = []
        pending = list(items)
        for token in ids:
            if token == token_id and pending:
                out.append(pending.pop(0))
            elif token == token_id and out and isinstance(out[-1], dict):
                continue  # the rest of a run of placeholders
            else:
                out.append(token)
        if pending:
            raise TokenizeError(f"gemma4: {len(pending)} {what} input(s) but no {placeholder} place left in the prompt")
        return out

    def untokenize(self, token_weight_pair: list[tuple]) -> list[tuple]:
        return [(pair, self.backend.id_to_token(int(pair[0]))) for pair in token_weight_pair]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """ComfyUI's `Gemma4SDTokenizer.decode` (see the module doc)."""
        text = self.backend.decode([int(t) for t in token_ids], skip_special_tokens=False)
        text = re.sub(r"<\|channel>thought\n(.*?)<channel\|>", r"<think>\n\1</think>", text, flags=re.DOTALL)
        text = text.replace("<|channel>thought\n", "<think>\n")
        text = re.sub(r"<\|channel>\w*\n?|<channel\|>|<\|turn>\w*\n?|<turn\|>", "", text)
        return text.replace("<eos>", "").strip()


class Gemma4FamilyTokenizer(FamilyTokenizer):
    """ComfyUI's `Gemma4Tokenizer` (an SD1Tokenizer named "gemma4": tokens under "gemma4")."""

    clip_name = clip = GEMMA4_SLOT

    def state_dict(self) -> dict:
        return getattr(self, GEMMA4_SLOT).state_dict()

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, GEMMA4_SLOT).decode(list(token_ids), skip_special_tokens)


class Gemma4TEModel(TextEncoderSet):
    """ComfyUI's `Gemma4TEModel_` (an SD1ClipModel named "gemma4" around the tower)."""


GEMMA4_TEXT_ENCODERS = EncoderSetSpec(
    "gemma4", (EncoderOptions(GEMMA4_SLOT, GEMMA4_SLOT, PAD_ID, None, False, projected_pooled=False, kind="gemma4"),),
    GEMMA4_SLOT, set_class=Gemma4TEModel, tokenizer_class=Gemma4FamilyTokenizer)


# --- the file ---

def readable_view(checkpoint: Any) -> Any:
    """The file as the tower's loader reads it: quantised layers dequantised as read, their
    scales and descriptions hidden (a float file as it is)."""
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    try:
        layers = quantized_layers(checkpoint.tensors, getattr(checkpoint, "metadata", None) or {}, checkpoint.read)
    except QuantFormatError as exc:
        raise Gemma4FileError(f"{checkpoint.path}: {exc}") from None
    return QuantizedHeader.for_detection(checkpoint, layers) if layers else checkpoint


def detect(view: Any, **overrides: Any) -> Gemma4Config:
    """The tower of a Gemma 4 file view (`Gemma4FileError` when there is none or it is broken)."""
    try:
        config = Gemma4Config.detect_from_weights(view.tensors, "", **overrides)
    except Gemma4DetectionError as exc:
        raise Gemma4FileError(f"{view.path}: {exc}") from None
    if config is None:
        raise Gemma4FileError(f"{view.path}: not a Gemma 4 text encoder (no 'model.layers.0.layer_scalar')")
    return config


def tokenizer_for(view: Any, config: Gemma4Config) -> Gemma4Tokenizer:
    if TOKENIZER_KEY not in view.tensors:
        raise MissingGemma4TokenizerError(str(view.path))
    data = view.read(TOKENIZER_KEY, None)
    backend = backend_from_data(data, f"{view.path}: {TOKENIZER_KEY}")
    # ComfyUI's 12B / 31B ("prime_empty_thought") tokenizers close an empty thought when not thinking;
    # the 12B's ("unified") frames its audio raw for its audio projector.
    from comfy_core.text_encoders.gemma4_media import audio_frame_of, holds_unified_audio

    frame = audio_frame_of(view.tensors) if holds_unified_audio(view.tensors) else 0
    return Gemma4Tokenizer(backend, embedding_width=config.hidden_size, data=data,
                           prime_empty_thought=config.name in ("gemma4_12b", "gemma4_31b"), audio_frame=frame)


def build_tower(view: Any, config: Gemma4Config, dtype: torch.dtype | None) -> Any:
    """The Gemma 4 tower of the file view, its tensors read on access in `dtype` (None: as stored)."""
    from comfy_core.checkpoint.reader import LazyStateDict

    from comfy_core.text_encoders.gemma4_audio import build_audio, holds_audio
    from comfy_core.text_encoders.gemma4_media import (build_unified_audio, build_unified_vision,
                                                       holds_unified_audio, holds_unified_vision)
    from comfy_core.text_encoders.gemma4_vision import Gemma4VisionError, build_vision, holds_vision

    state = LazyStateDict(view, dtype)
    read = lambda name: state[name]  # noqa: E731
    try:
        tower = build_gemma4_encoder(config, state, dtype)
        if holds_vision(view.tensors):  # E2B / E4B's vision encoder
            tower.vision = build_vision(view.tensors, read, config.hidden_size, dtype)
        elif holds_unified_vision(view.tensors):  # the 12B's encoder-free image embedder
            tower.vision = build_unified_vision(view.tensors, read, config.hidden_size, dtype)
        if holds_audio(view.tensors):  # E2B / E4B's audio conformer
            tower.audio = build_audio(view.tensors, read, config.hidden_size, dtype)
        elif holds_unified_audio(view.tensors):  # the 12B's audio projector (raw waveform frames)
            tower.audio = build_unified_audio(view.tensors, read, config.hidden_size, dtype)
    except (Gemma4KeyError, Gemma4DetectionError, Gemma4VisionError) as exc:
        raise Gemma4FileError(f"{view.path}: {exc}") from None
    tower.eval()
    return tower


def load_gemma4_clip(path: str | Path, dtype: torch.dtype | None = None, load_device: Any = None,
                     offload_device: Any = "cpu", **overrides: Any) -> Any:
    """A Gemma 4 file (without LTX's projection) -> CLIP: the tower as "gemma4", which encodes
    (the final normed states) and generates (TextGenerate). `overrides`: config fields the shapes
    cannot show, for towers ComfyUI has no config of."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.text_encoders.clip import CLIP

    with CheckpointFile(path) as stored:
        view = readable_view(stored)
        config = detect(view, **overrides)
        tokenizer = tokenizer_for(view, config)
        tower = build_tower(view, config, dtype)
    module = Gemma4TEModel(GEMMA4_TEXT_ENCODERS, {GEMMA4_SLOT: tower})
    log.info("Gemma 4 text encoder: %s (%s, width %d x%d)", Path(path).name, config.name, config.hidden_size,
             config.num_layers)
    return CLIP.from_encoders(module, Gemma4FamilyTokenizer({GEMMA4_SLOT: tokenizer}), load_device, offload_device)


__all__ = ["GEMMA4_TEXT_ENCODERS", "Gemma4FamilyTokenizer", "Gemma4FileError", "Gemma4TEModel", "Gemma4Tokenizer",
           "MissingGemma4TokenizerError", "PROJECTION_MARK", "backend_from_data", "build_tower", "detect",
           "holds_gemma4", "load_gemma4_clip", "readable_view", "tokenizer_for"]
