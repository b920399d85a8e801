"""Text generation (comfy_core/text_encoders/generate.py and the Qwen3 tower's LM head and key/value
cache): the sampling filters against hand-computed values, ComfyUI's order of penalties,
temperature, top-k, min-p and top-p, the penalty set, stop tokens, seeded reproducibility, and greedy
decoding equal to transformers' `Qwen3ForCausalLM.generate` on the same tiny weights and prompt ids
(tied and untied LM head)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.text_encoders.generate import (
    GenerationError,
    KVCache,
    SamplingOptions,
    apply_penalties,
    can_generate,
    generate_tokens,
    min_p_filter,
    next_token,
    sampling_probs,
    top_k_filter,
    top_p_filter,
)
from comfy_core.text_encoders.qwen3 import STOP_TOKENS, Qwen3Config, build_qwen3_encoder
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import TINY_QWEN3, hf_config, tiny_qwen3_state_dict
from tests.fixtures.t5_files import header_of

# Z-Image's chat template around "a photo of a cat" (Qwen ids).
PROMPT_IDS = [151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198, 151644, 77091, 198]
LOW = torch.finfo(torch.float32).min


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3_state_dict(seed=5)


@pytest.fixture(scope="module")
def tower(state):
    return build_qwen3_encoder(Qwen3Config.detect_from_weights(header_of(state), ""), state)


def _greedy() -> SamplingOptions:
    return SamplingOptions(do_sample=False)


def _ours(tower, ids, n, options, **kwargs):
    with torch.no_grad():
        return generate_tokens(tower, tower.embed_ids(torch.tensor([ids])), n, options, **kwargs)


def _transformers_greedy(state, ids, n, tied=True):
    from transformers import Qwen3ForCausalLM

    config = hf_config()
    config.tie_word_embeddings, config.use_cache = tied, True
    config._attn_implementation = "eager"
    model = Qwen3ForCausalLM(config).eval()
    weights = {k: v.float() for k, v in state.items()}
    if tied:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    model.load_state_dict(weights, strict=True)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


# --- the filters, by hand ----------------------------------------------------------------------------

def test_penalties_touch_only_seen_tokens():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    seen = torch.tensor([True, True, False, False])
    # repetition 2: 2 -> 1, -1 -> -2; then presence 0.5 subtracted from the seen ones
    assert apply_penalties(logits, seen, 2.0, 0.5).tolist() == [[0.5, -2.5, 0.5, 3.0]]
    assert apply_penalties(logits, None, 2.0, 0.5) is logits
    assert logits.tolist() == [[2.0, -1.0, 0.5, 3.0]]  # not changed in place


def test_top_k_keeps_the_largest_in_descending_order_with_their_ids():
    values, ids = top_k_filter(torch.tensor([[1.0, 4.0, 2.0, 3.0]]), 2)
    assert values.tolist() == [[4.0, 3.0]] and ids.tolist() == [[1, 3]]
    logits = torch.tensor([[1.0, 4.0]])
    assert top_k_filter(logits, 0) == (logits, None)
    assert top_k_filter(logits, 10)[1].tolist() == [[1, 0]]  # k beyond the vocabulary: all of it


def test_min_p_drops_tokens_below_a_fraction_of_the_top_probability():
    probs = [0.5, 0.3, 0.15, 0.05]
    logits = torch.tensor([[math.log(p) for p in probs]])
    kept = min_p_filter(logits, 0.2)  # threshold 0.2 * 0.5 = 0.1: only 0.05 goes
    assert kept[0, :3].tolist() == logits[0, :3].tolist() and kept[0, 3].item() == LOW
    assert min_p_filter(logits, 0.0) is logits


def test_top_p_keeps_tokens_while_the_cumulative_probability_stays_within_it():
    probs = [0.15, 0.5, 0.05, 0.3]  # sorted: 0.5, 0.3, 0.15, 0.05; cumulative 0.5, 0.8, 0.95, 1.0
    logits = torch.tensor([[math.log(p) for p in probs]])
    assert (top_p_filter(logits, 0.85) == LOW).tolist() == [[True, False, True, False]]  # 0.5, 0.3 kept
    assert (top_p_filter(logits, 0.7) == LOW).tolist() == [[True, False, True, True]]  # 0.8 > 0.7: 0.3 goes
    assert (top_p_filter(logits, 0.4) == LOW).tolist() == [[True, False, True, True]]  # the first always stays
    assert (top_p_filter(logits, 0.96) == LOW).tolist() == [[False, False, True, False]]
    assert top_p_filter(logits, 1.0) is logits


def test_penalties_come_before_temperature():
    logits = torch.tensor([[-1.0, 0.0]])
    seen = torch.tensor([True, False])
    options = SamplingOptions(temperature=0.5, top_k=0, top_p=1.0, repetition_penalty=2.0, presence_penalty=1.0,
                              seed=0)
    probs, ids = sampling_probs(logits, options, seen)
    # penalised -1 -> -2 - 1 = -3, then / 0.5 -> -6 (temperature first would give -5)
    torch.testing.assert_close(probs, torch.softmax(torch.tensor([[-6.0, 0.0]]), -1))
    assert ids is None


def test_min_p_and_top_p_act_on_the_top_k_renormalised():
    logits = torch.tensor([[math.log(p) for p in (0.4, 0.05, 0.3, 0.2, 0.05)]])
    options = SamplingOptions(top_k=3, min_p=0.6, top_p=1.0, seed=0)
    probs, ids = sampling_probs(logits, options)
    # top-3: 0.4, 0.3, 0.2 (ids 0, 2, 3) -> 4/9, 3/9, 2/9; min-p 0.6 * 4/9 = 0.267 drops 2/9
    assert ids.tolist() == [[0, 2, 3]]
    torch.testing.assert_close(probs, torch.tensor([[4 / 7, 3 / 7, 0.0]]))


def test_greedy_is_the_raw_argmax():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    seen = torch.tensor([False, True, False])
    greedy = SamplingOptions(do_sample=False, repetition_penalty=100.0)
    assert next_token(logits, greedy, None, seen).tolist() == [[1]]  # penalties do not apply
    cold = SamplingOptions(temperature=0.0, seed=1)
    assert next_token(logits, cold, None).tolist() == [[1]]


def test_a_draw_maps_back_through_the_top_k_ids():
    logits = torch.tensor([[0.0, 5.0, 1.0, 9.0]])
    options = SamplingOptions(top_k=1, seed=0)
    assert next_token(logits, options, torch.Generator().manual_seed(0)).tolist() == [[3]]


def test_bad_options_are_typed_errors():
    for bad in (dict(seed=None), dict(seed=2 ** 64), dict(seed=1, temperature=-1.0), dict(seed=1, top_k=-1),
                dict(seed=1, top_p=1.5), dict(seed=1, min_p=-0.1), dict(seed=1, repetition_penalty=0.0),
                dict(seed=1, presence_penalty=-1.0)):
        with pytest.raises(GenerationError):
            SamplingOptions(**bad)
    SamplingOptions(do_sample=False, seed=None)  # greedy needs no seed


def test_the_widgets_largest_seed_seeds_the_draw():
    options = SamplingOptions(top_k=0, top_p=1.0, seed=0xffffffffffffffff)
    flat = [[0.0] * 50]
    first = generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 6, options)
    assert first == generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 6, options)
    assert first != generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 6, SamplingOptions(top_k=0, seed=1))


# --- the loop on a scripted model --------------------------------------------------------------------

class Scripted:
    """A causal LM whose logits are fixed per step (the generation loop's side of the protocol)."""

    can_generate = True

    def __init__(self, rows):
        self.rows = [torch.tensor(r, dtype=torch.float32) for r in rows]
        self.steps = 0
        self.inputs = []

    def new_cache(self, batch, capacity):
        self.capacity = capacity
        return KVCache(1, batch, capacity, 1, 1, "cpu")

    def embed_ids(self, ids):
        self.inputs.append(ids.tolist())
        return torch.zeros(ids.shape[0], ids.shape[1], 2)

    def decode_step(self, embeds, cache):
        cache.advance(embeds.shape[1])
        return torch.zeros(embeds.shape[0], 2)

    def logits(self, hidden):
        row = self.rows[min(self.steps, len(self.rows) - 1)]
        self.steps += 1
        return row[None]


def test_a_stop_token_ends_generation_and_is_returned():
    model = Scripted([[0, 5, 0, 0], [0, 0, 5, 0], [0, 0, 0, 5], [9, 0, 0, 0]])
    ids = generate_tokens(model, torch.zeros(1, 3, 2), 10, SamplingOptions(do_sample=False), stop_tokens=(3,))
    assert ids == [1, 2, 3]
    assert model.inputs == [[[1]], [[2]]]  # each token is fed back; the stop token is not
    assert model.capacity == 3 + 10
    assert generate_tokens(Scripted([[0, 5]]), torch.zeros(1, 1, 2), 4, SamplingOptions(do_sample=False)) == [1] * 4


def test_the_repetition_penalty_counts_generated_tokens_from_the_second_step():
    flat = [[3.0, 2.9, 2.8, -5.0]]
    options = SamplingOptions(top_k=1, repetition_penalty=2.0, seed=0)
    # step 1 takes 0 (nothing seen yet); then 0 is 1.5 and 1 wins, then 2, then 0 again (1.5 > 1.45, 1.4)
    assert generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 4, options) == [0, 1, 2, 0]
    assert generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 2, options, initial_tokens=[0]) == [1, 2]
    greedy = SamplingOptions(do_sample=False, repetition_penalty=2.0)
    assert generate_tokens(Scripted(flat), torch.zeros(1, 1, 2), 3, greedy) == [0, 0, 0]


def test_progress_is_reported_per_token_and_may_stop_the_loop():
    seen = []

    def progress(done, total):
        seen.append((done, total))
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_tokens(Scripted([[0, 5]]), torch.zeros(1, 1, 2), 5, SamplingOptions(do_sample=False),
                        progress=progress)
    assert seen == [(1, 5), (2, 5)]


def test_bad_lengths_are_typed_errors():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(GenerationError, match="max_length"):
            generate_tokens(Scripted([[1.0]]), torch.zeros(1, 1, 2), bad, SamplingOptions(do_sample=False))
    with pytest.raises(GenerationError, match="prompt embeddings"):
        generate_tokens(Scripted([[1.0]]), torch.zeros(1, 0, 2), 1, SamplingOptions(do_sample=False))
    cache = KVCache(1, 1, 2, 1, 1, "cpu")
    with pytest.raises(GenerationError, match="holds 2 positions"):
        cache.update(0, torch.zeros(1, 3, 1, 1), torch.zeros(1, 3, 1, 1))


# --- the Qwen3 tower -----------------------------------------------------------------------------------

def test_the_qwen3_tower_can_generate_with_qwens_stop_tokens(tower):
    assert can_generate(tower) and tower.stop_tokens == STOP_TOKENS == (151643, 151645)
    assert tower.transformer.output_weight() is tower.token_embedding().weight  # tied, as Qwen3-4B


def test_greedy_generation_equals_transformers(tower, state):
    ours = _ours(tower, PROMPT_IDS, 8, _greedy())
    assert ours == _transformers_greedy(state, PROMPT_IDS, 8)
    assert len(ours) == 8


def test_an_untied_lm_head_is_used_when_the_file_has_one(state):
    head = 0.3 * torch.randn(TINY_QWEN3["vocab_size"], TINY_QWEN3["hidden_size"],
                             generator=torch.Generator().manual_seed(1))
    untied = {**state, "lm_head.weight": head}
    tower = build_qwen3_encoder(Qwen3Config.detect_from_weights(header_of(untied), ""), untied)
    assert "transformer.lm_head_weight" not in tower.state_dict()  # the encoder's state dict is unchanged
    ours = _ours(tower, PROMPT_IDS[:5], 6, _greedy())
    assert ours == _transformers_greedy(untied, PROMPT_IDS[:5], 6, tied=False)


def test_the_cache_gives_the_same_logits_as_a_full_forward(tower):
    """One step over the whole prompt vs the prompt fed in two parts through the cache."""
    ids = torch.tensor([PROMPT_IDS])
    with torch.no_grad():
        whole = tower.logits(tower.decode_step(tower.embed_ids(ids), tower.new_cache(1, 13)))
        cache = tower.new_cache(1, 13)
        tower.decode_step(tower.embed_ids(ids[:, :9]), cache)
        parts = tower.logits(tower.decode_step(tower.embed_ids(ids[:, 9:]), cache))
        final = tower.encode_ids(ids, layer_idx=None)[:, -1]  # the encoder's final normed output
    torch.testing.assert_close(parts, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(whole, final @ tower.token_embedding().weight.float().T, atol=1e-4, rtol=1e-5)


def test_a_bf16_head_is_cast_to_float32_in_row_chunks(state):
    half = build_qwen3_encoder(Qwen3Config.detect_from_weights(header_of(state), ""), state, dtype=torch.bfloat16)
    hidden = torch.randn(2, TINY_QWEN3["hidden_size"], generator=torch.Generator().manual_seed(2))
    expected = hidden @ half.token_embedding().weight.float().T
    logits = half.logits(hidden)
    assert logits.dtype == torch.float32 and logits.shape == (2, TINY_QWEN3["vocab_size"])
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_sampling_is_reproducible_per_seed(tower):
    def run(seed):
        options = SamplingOptions(temperature=1.5, top_k=0, top_p=1.0, seed=seed)
        return _ours(tower, PROMPT_IDS, 6, options)

    first = run(7)
    assert run(7) == first
    assert run(8) != first


def test_a_wrong_lm_head_is_refused_when_generating(state):
    bad = {**state, "lm_head.weight": torch.zeros(3, 2)}
    tower = build_qwen3_encoder(Qwen3Config.detect_from_weights(header_of(bad), ""), bad)
    with pytest.raises(GenerationError, match="LM head has shape"):
        _ours(tower, PROMPT_IDS[:3], 2, _greedy())
