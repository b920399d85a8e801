"""A1111 prompt -> CONDITIONING entries: AND weights, schedules as percent ranges, negatives."""
import pytest
import torch

from comfy_core.prompt import PromptSyntaxError
from comfy_core.prompt.conditioning import PromptOptions, check_prompt, encode_prompt
from comfy_core.prompt.encode import encode_texts
from comfy_core.prompt.timeline import schedule_ranges
from tests.fixtures.clips import one_thread, sd1  # noqa: F401 -- fixtures

BOS, EOS = 49406, 49407


def test_plain_prompt_is_one_plain_entry(sd1):
    [[cond, meta]] = encode_prompt(sd1, "a cat")
    assert cond.shape == (1, 77, 64)
    assert set(meta) == {"pooled_output"}
    assert torch.allclose(cond, encode_texts(sd1, ["a cat"]).cond)


def test_and_parts_carry_composable_weights(sd1):
    entries = encode_prompt(sd1, "a cat AND a dog:0.5")
    assert [meta["composable_weight"] for _, meta in entries] == [1.0, 0.5]
    assert torch.allclose(entries[1][0], encode_texts(sd1, [" a dog"]).cond)


def test_trailing_weight_without_and_is_composable(sd1):
    [[cond, meta]] = encode_prompt(sd1, "a photo, cat:1.5")
    assert meta["composable_weight"] == 1.5
    assert torch.allclose(cond, encode_texts(sd1, ["a photo, cat"]).cond)


def test_duplicate_and_parts_both_count(sd1):
    entries = encode_prompt(sd1, "a AND a")
    assert len(entries) == 2 and [m["composable_weight"] for _, m in entries] == [1.0, 1.0]


def test_negative_prompt_is_not_split(sd1):
    [[cond, meta]] = encode_prompt(sd1, "a AND b:2", PromptOptions(negative=True))
    assert "composable_weight" not in meta
    assert torch.allclose(cond, encode_texts(sd1, ["a AND b:2"]).cond)


def test_schedule_becomes_percent_ranges_from_one_batch(sd1):
    entries = encode_prompt(sd1, "a [(cat:1.3):dog:4]", PromptOptions(steps=10, scheduler="karras"))
    batch = encode_texts(sd1, ["a (cat:1.3)", "a dog"]).cond  # one batch: shared emphasis mean
    assert torch.allclose(entries[0][0], batch[0:1]) and torch.allclose(entries[1][0], batch[1:2])
    spans = [(m["start_percent"], m["end_percent"]) for _, m in entries]
    assert spans == schedule_ranges([4, 10], 10, "karras")


def test_alternation_cycles_and_merges_repeats(sd1):
    entries = encode_prompt(sd1, "[cat|dog]", PromptOptions(steps=4))
    assert len(entries) == 4
    assert torch.allclose(entries[0][0], entries[2][0]) and not torch.allclose(entries[0][0], entries[1][0])
    assert len(encode_prompt(sd1, "[cat|cat]", PromptOptions(steps=4))) == 1


def test_extra_keys_are_added(sd1):
    [[_, meta]] = encode_prompt(sd1, "x", PromptOptions(extra={"width": 640, "target_height": 512}))
    assert meta["width"] == 640 and meta["target_height"] == 512


def test_check_prompt_and_options():
    check_prompt("a [b:c:3] AND (d:1.2)")
    with pytest.raises(PromptSyntaxError):
        check_prompt("a [(b:1.2.3):c:3]")
    check_prompt("(b:1.2.3)", emphasis="None")
    with pytest.raises(ValueError, match="emphasis"):
        PromptOptions(emphasis="bogus")
    with pytest.raises(ValueError, match="steps"):
        PromptOptions(steps=0)


def test_schedule_batch_keeps_repeated_rows_in_original_mean(sd1):
    """webui encodes every schedule row, repeats included: `[(cat:3)|dog|bird] photo` at 4 steps is
    the batch cat, dog, bird, cat, and "Original"'s mean is taken over those 4 rows."""
    entries = encode_prompt(sd1, "[(cat:3)|dog|bird] photo", PromptOptions(steps=4))
    assert len(entries) == 4
    encode = sd1.tokenizer.clip_tokenizer.encode
    rows, multipliers = [], []
    for word, weight in (("cat", 3.0), ("dog", 1.0), ("bird", 1.0), ("cat", 3.0)):
        tokens = [BOS, *encode(word), *encode(" photo"), EOS]
        rows.append(tokens + [EOS] * (77 - len(tokens)))
        multipliers.append([1.0, weight] + [1.0] * 75)  # each word and "photo" is one token here
    with sd1.patcher.applied() as encoders, torch.no_grad():
        z = encoders.clip_l.encode_ids(torch.tensor(rows), [], layer_idx=None, layer_norm_hidden=True).hidden
    weighted = z * torch.tensor(multipliers)[..., None]
    expected = weighted * (z.mean() / weighted.mean())  # webui's Original over the 4-row batch
    for i, (cond, _) in enumerate(entries):
        assert torch.allclose(cond, expected[i:i + 1], atol=1e-6)
    distinct = weighted[:3] * (z[:3].mean() / weighted[:3].mean())  # the old, de-duplicated batch
    assert not torch.allclose(distinct, expected[:3], atol=1e-4)


def test_neighbouring_repeats_still_count_in_the_batch(sd1):
    """`[fe|||]male` at 8 steps: rows female, male, male, male, female, male, male, male; the
    entries merge neighbours, the mean does not."""
    entries = encode_prompt(sd1, "[(fe:2)|||]male", PromptOptions(steps=8))
    rows = ["(fe:2)male", "male", "male", "male"] * 2
    batch = encode_texts(sd1, rows)
    assert [m["end_percent"] > m["start_percent"] for _, m in entries] == [True] * 4
    assert torch.allclose(entries[0][0], batch.cond[batch.row("(fe:2)male")].unsqueeze(0))
    assert torch.allclose(entries[1][0], batch.cond[batch.row("male")].unsqueeze(0))
    assert not torch.allclose(entries[1][0], encode_texts(sd1, ["(fe:2)male", "male"]).cond[1:2], atol=1e-4)
