"""parse_prompt_attention: webui 1.10's documented examples and edge cases (reference section 2)."""
import pytest

from comfy_core.prompt import PromptSyntaxError, parse_prompt_attention


@pytest.mark.parametrize("text, expected", [
    # webui's doctests
    ("normal text", [["normal text", 1.0]]),
    ("an (important) word", [["an ", 1.0], ["important", 1.1], [" word", 1.0]]),
    ("(unbalanced", [["unbalanced", 1.1]]),
    ("\\(literal\\]", [["(literal]", 1.0]]),
    ("(unnecessary)(parens)", [["unnecessaryparens", 1.1]]),
    ("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).",
     [["a ", 1.0], ["house", 1.5730000000000004], [" ", 1.1], ["on", 1.0], [" a ", 1.1],
      ["hill", 0.55], [", sun, ", 1.1], ["sky", 1.4641000000000006], [".", 1.1]]),
    # edge cases from the reference
    ("a \\ b", [["a  b", 1.0]]),
    ("(a\\:1.5)", [["a", 1.5]]),
    ("(a:1e2)", [["a:1e2", 1.1]]),
    ("a)b", [["a)b", 1.0]]),
    ("a:1.5)", [["a:1.5)", 1.0]]),
    ("[a]", [["a", 0.9090909090909091]]),
    ("((a))", [["a", 1.2100000000000002]]),
    ("(((a)))", [["a", 1.3310000000000004]]),
    ("([a])", [["a", 1.0]]),
    ("(a[b)c]", [["a", 1.1], ["b", 1.0], ["c", 0.9090909090909091]]),
    ("a (b [c (d:1.3)] e) f", [["a ", 1.0], ["b ", 1.1], ["c ", 1.0], ["d", 1.3000000000000003],
                               [" e", 1.1], [" f", 1.0]]),
    ("(a: 1.5 )", [["a", 1.5]]),
    ("(a:-1)", [["a", -1.0]]),
    ("a\\\\b", [["a\\b", 1.0]]),
    ("", [["", 1.0]]),
    ("()", [["", 1.0]]),
    ("[]", [["", 1.0]]),
    ("(:1.5)", [["", 1.0]]),
    ("a:b", [["a:b", 1.0]]),
    ("[(unbalanced", [["unbalanced", 1.0]]),
])
def test_documented_examples(text, expected):
    assert parse_prompt_attention(text) == expected


def test_weights_are_exact_python_float_products():
    # 1.1 * 1.1 in binary floating point, not the decimal 1.21
    assert parse_prompt_attention("((a))")[0][1] == 1.1 * 1.1
    assert parse_prompt_attention("[a]")[0][1] == 1 / 1.1


@pytest.mark.parametrize("text, expected", [
    ("BREAK", [["", 1.0], ["BREAK", -1], ["", 1.0]]),
    ("a BREAK b", [["a", 1.0], ["BREAK", -1], ["b", 1.0]]),
    ("a\n BREAK\n\nb", [["a", 1.0], ["BREAK", -1], ["b", 1.0]]),
    ("aBREAKb", [["aBREAKb", 1.0]]),
    ("a break b", [["a break b", 1.0]]),
    ("a BREAK BREAK b", [["a", 1.0], ["BREAK", -1], ["", 1.0], ["BREAK", -1], ["b", 1.0]]),
    # inside brackets the marker is multiplied, so it is no longer a chunk break
    ("(a BREAK b)", [["a", 1.1], ["BREAK", -1.1], ["b", 1.1]]),
])
def test_break(text, expected):
    assert parse_prompt_attention(text) == expected


def test_break_marker_weight_is_the_integer_minus_one():
    marker = parse_prompt_attention("a BREAK b")[1]
    assert marker[1] == -1 and isinstance(marker[1], int)


@pytest.mark.parametrize("text, position", [("(a:1.2.3)", 3), ("x (a:.)", 5), ("((b: 1..2 ))", 5)])
def test_bad_weight_raises_typed_error_with_position(text, position):
    with pytest.raises(PromptSyntaxError) as info:
        parse_prompt_attention(text)
    assert info.value.position == position
    assert f"character {position}" in str(info.value)
    assert isinstance(info.value, ValueError)  # webui raises ValueError; scripts catching it still work


def test_returns_lists_not_tuples():
    result = parse_prompt_attention("a (b)")
    assert all(type(segment) is list for segment in result)
