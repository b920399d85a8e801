"""Fixture pack (area "prompt"): prompt engines that reach into a CLIP the way smZNodes does
(ComfyUI_smZNodes/smZNodes.py `HijackClip` / `HijackClipComfy`, modules/text_processing/
classic_engine.py), so tests can check that our CLIP honours them and that the numbers are what
the engines compute.

- `PromptHijackEncode`: walks `clip.tokenizer.__dict__` and `clip.cond_stage_model.__dict__` for
  the per-encoder tokenizers and towers, builds an A1111-style engine over each pair (it copies
  `vars(tokenizer)`, reads the transformers tokenizer's vocabulary, wraps the tower's
  `token_embedding` to splice in a vector), replaces `tokenize_with_weights` and
  `encode_token_weights` on them, encodes through `clip.tokenize` / `clip.encode_from_tokens`,
  and unhooks.
- `PromptComfyTokenize`: replaces the per-encoder `tokenize_with_weights` by its own copy of
  ComfyUI's (built on `tokenizer.tokenizer`, `tokens_start`, `_try_get_embedding`, ...) and
  encodes with `nodes.CLIPTextEncode().encode(clip, text)`.
"""
from __future__ import annotations

import contextlib
import re
from functools import partial

import comfy.sd
import nodes
import torch
from comfy import model_management
from comfy.sd1_clip import escape_important, token_weights, unescape_important


def iter_items(d):
    for key, value in d.items():
        yield key, value
        if isinstance(value, dict):
            yield from iter_items(value)


class SpliceEmbedding(torch.nn.Module):
    """smZNodes' CLIPEmbeddingForTextualInversion: the wrapped table, then `vector` written at
    position `offset` of every row (when one is pending)."""

    def __init__(self, wrapped, engine):
        super().__init__()
        self.wrapped = wrapped
        self.engine = engine
        self.weight = self.wrapped.weight

    def forward(self, input_ids, out_dtype):
        fix = self.engine.fix
        self.engine.fix = None
        embeds = self.wrapped(input_ids, out_dtype)
        if fix is None:
            return embeds
        offset, vector = fix
        rows = [torch.cat([row[:offset], vector.to(row)[None], row[offset + 1:]]) for row in embeds]
        return torch.stack(rows)


class ClassicEngine:
    """An A1111-style engine: 75-token chunks, `(word:1.3)` multipliers applied to the encoder's
    output with the mean restored (webui's "Original" emphasis)."""

    def __init__(self, text_encoder, tokenizer, fix=None):
        vars(self).update(vars(tokenizer))  # as smZNodes' populate_self_variables
        self._tokenizer = tokenizer
        self.text_encoder = text_encoder
        self._try_get_embedding = tokenizer._try_get_embedding
        self.pending_fix = fix
        self.fix = None
        embeddings = text_encoder.transformer.text_model.embeddings
        embeddings.token_embedding = SpliceEmbedding(embeddings.token_embedding, self)
        vocab = self.tokenizer.get_vocab()
        self.comma_token = vocab.get(",</w>")
        self.tokenizer._eventual_warn_about_too_long_sequence = lambda *a, **k: None
        self.id_start, self.id_end, self.id_pad = self.start_token, self.end_token, self.pad_token

    def unhook(self):
        embeddings = self.text_encoder.transformer.text_model.embeddings
        embeddings.token_embedding = embeddings.token_embedding.wrapped
        del self._try_get_embedding
        if hasattr(self.tokenizer, "_eventual_warn_about_too_long_sequence"):
            del self.tokenizer._eventual_warn_about_too_long_sequence

    def tokenize_with_weights(self, texts, return_word_ids=False):
        chunks = []
        for text in texts:
            ids, mults = [], []
            for segment, weight in token_weights(escape_important(text), 1.0):
                piece = self.tokenizer([unescape_important(segment)], truncation=False,
                                       add_special_tokens=False)["input_ids"][0]
                ids += piece
                mults += [weight] * len(piece)
            ids, mults = ids[:75], mults[:75]
            pad = 75 - len(ids)
            chunks.append(([self.id_start] + ids + [self.id_end] * (pad + 1),
                           [1.0] + mults + [1.0] * (pad + 1)))
        return [([c[0] for c in chunks], [c[1] for c in chunks])]

    def encode_token_weights(self, token_weight_pairs):
        zs = []
        for tokens, multipliers in token_weight_pairs:
            self.fix = self.pending_fix
            z, pooled = self.text_encoder(torch.asarray(tokens))
            original_mean = z.mean()
            z = z * torch.asarray(multipliers).to(z).unsqueeze(-1)
            z = z * (original_mean / z.mean())
            z.pooled = pooled
            zs.append(z)
        device = model_management.text_encoder_offload_device()
        return torch.hstack(zs).to(device), zs[0].pooled.to(device)


@contextlib.contextmanager
def hijack_clip(clip, fix=None):
    pairs = {}
    for obj, attr in (("tokenizer", "tokenize_with_weights"), ("cond_stage_model", "encode_token_weights")):
        for name, value in iter_items(getattr(clip, obj).__dict__):
            if hasattr(value, attr):
                pairs.setdefault(name, {})[obj] = value
    try:
        for name, found in pairs.items():
            engine = ClassicEngine(found["cond_stage_model"], found["tokenizer"], fix)
            found["tokenizer"].tokenize_with_weights = engine.tokenize_with_weights
            found["cond_stage_model"].encode_token_weights = engine.encode_token_weights
        yield clip, sorted(pairs)
    finally:
        for name, found in pairs.items():
            found["cond_stage_model"].encode_token_weights.__self__.unhook()
            del found["tokenizer"].tokenize_with_weights
            del found["cond_stage_model"].encode_token_weights


class PromptHijackEncode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip": ("CLIP",), "text": ("STRING", {"multiline": True}),
                             "splice_at": ("INT", {"default": -1, "min": -1, "max": 76})}}

    RETURN_TYPES = ("CONDITIONING", "STRING")
    FUNCTION = "encode"
    CATEGORY = "tests/prompt"

    def encode(self, clip: comfy.sd.CLIP, text, splice_at=-1):
        fix = None
        if splice_at >= 0:  # a recognisable vector: the table's row for "dog"
            tower = clip.cond_stage_model.clip_l
            dog = clip.tokenizer.clip_l.tokenizer(["dog"], add_special_tokens=False)["input_ids"][0][0]
            fix = (splice_at, tower.transformer.get_input_embeddings().weight[dog].detach().float())
        with hijack_clip(clip, fix) as (hooked, names):
            out = hooked.encode_from_tokens(hooked.tokenize([text]), return_pooled=True, return_dict=True)
        cond = out.pop("cond")
        return [[cond, out]], ",".join(names)


def tokenize_with_weights_custom(self, text, return_word_ids=False, tokenizer_options={}, **kwargs):
    """smZNodes' copy of ComfyUI's SDTokenizer.tokenize_with_weights, on the instance's attributes."""
    min_length = tokenizer_options.get(f"{self.embedding_key}_min_length", self.min_length)
    tokens = []
    for segment, weight in token_weights(escape_important(text), 1.0):
        split = re.split(" {0}|\n{0}".format(self.embedding_identifier), unescape_important(segment))
        words = [split[0]] + [self.embedding_identifier + s for s in split[1:]]
        for word in [w for w in words if w]:
            if word.startswith(self.embedding_identifier):
                embed, leftover = self._try_get_embedding(word[len(self.embedding_identifier):])
                if embed is not None:
                    tokens.append([(embed[x], weight) for x in range(embed.shape[0])])
                if not leftover:
                    continue
                word = leftover
            end = -1 if self.tokenizer_adds_end_token else None
            tokens.append([(t, weight) for t in self.tokenizer(word)["input_ids"][self.tokens_start:end]])
    batch = [(self.start_token, 1.0)]
    batches = [batch]
    for group in tokens:
        while group:
            room = self.max_length - 1 - len(batch)
            if len(group) > room:
                if len(group) >= self.max_word_length:
                    batch.extend(group[:room])
                    group = group[room:]
                batch.append((self.end_token, 1.0))
                if len(batch) < self.max_length and self.pad_to_max_length:
                    batch.extend([(self.pad_token, 1.0)] * (self.max_length - len(batch)))
                batch = [(self.start_token, 1.0)]
                batches.append(batch)
            else:
                batch.extend(group)
                group = []
    batch.append((self.end_token, 1.0))
    if self.pad_to_max_length and len(batch) < self.max_length:
        batch.extend([(self.pad_token, 1.0)] * (self.max_length - len(batch)))
    if min_length is not None and len(batch) < min_length:
        batch.extend([(self.pad_token, 1.0)] * (min_length - len(batch)))
    return batches


class PromptComfyTokenize:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip": ("CLIP",), "text": ("STRING", {"multiline": True})}}

    RETURN_TYPES = ("CONDITIONING", "BOOLEAN")
    FUNCTION = "encode"
    CATEGORY = "tests/prompt"

    def encode(self, clip, text):
        patched = []
        for _name, value in iter_items(clip.tokenizer.__dict__):
            if hasattr(value, "tokenize_with_weights"):
                value.tokenize_with_weights = partial(tokenize_with_weights_custom, value)
                patched.append(value)
        try:
            # The patch is seen through every later read of clip.tokenizer.
            seen = all(isinstance(getattr(clip.tokenizer, name, None), type(v)) and
                       isinstance(getattr(clip.tokenizer, name).tokenize_with_weights, partial)
                       for name, v in clip.tokenizer.__dict__.items() if v in patched)
            (cond,) = nodes.CLIPTextEncode().encode(clip, text)  # ComfyUI's positional order
        finally:
            for value in patched:
                del value.tokenize_with_weights
        return cond, bool(patched) and seen


NODE_CLASS_MAPPINGS = {
    "PromptHijackEncode": PromptHijackEncode,
    "PromptComfyTokenize": PromptComfyTokenize,
}
