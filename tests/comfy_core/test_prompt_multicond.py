"""get_multicond_prompt_list: AND split and composable weights (reference section 0.2)."""
from comfy_core.prompt import get_multicond_prompt_list
from comfy_core.prompt.multicond import split_and


def test_and_split_with_weights():
    res, flat, index = get_multicond_prompt_list(["a cat AND a dog:0.5"])
    assert res == [[(0, 1.0), (1, 0.5)]]
    assert flat == ["a cat", " a dog"]
    assert index == {"a cat": 0, " a dog": 1}


def test_weight_stripped_without_and():
    assert split_and("a photo, cat:1.5") == [("a photo, cat", 1.5)]


def test_weight_forms():
    assert split_and("x : -2.") == [("x", -2.0)]
    assert split_and("x:.25  ") == [("x", 0.25)]
    assert split_and("x:+3") == [("x", 3.0)]
    assert split_and("x:1e2") == [("x:1e2", 1.0)]  # no exponent form
    assert split_and("x:1.5 y") == [("x:1.5 y", 1.0)]  # weight only at the end


def test_and_is_case_sensitive_whole_word():
    assert split_and("ANDROID and band") == [("ANDROID and band", 1.0)]
    assert split_and("a AND") == [("a", 1.0), ("", 1.0)]


def test_texts_deduplicated_across_batch():
    res, flat, _ = get_multicond_prompt_list(["a AND b", "b AND a:2", "a"])
    # leading whitespace is part of the text: " a" and "a" are different subprompts
    assert flat == ["a", " b", "b", " a"]
    assert res == [[(0, 1.0), (1, 1.0)], [(2, 1.0), (3, 2.0)], [(0, 1.0)]]
