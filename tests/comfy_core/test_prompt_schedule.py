"""get_learned_conditioning_prompt_schedules: webui 1.10's doctests and edge cases (reference section 1)."""
import pytest

from comfy_core.prompt import get_learned_conditioning_prompt_schedules


def g(prompt, steps=10, hires=None, old=False):
    return get_learned_conditioning_prompt_schedules([prompt], steps, hires, old)[0]


def alternating(a, b, steps=10):
    return [[i, a if i % 2 else b] for i in range(1, steps + 1)]


@pytest.mark.parametrize("prompt, expected", [
    ("test", [[10, "test"]]),
    ("a [b:3]", [[3, "a "], [10, "a b"]]),
    ("a [b: 3]", [[3, "a "], [10, "a b"]]),
    ("a [[[b]]:2]", [[2, "a "], [10, "a [[b]]"]]),
    ("[(a:2):3]", [[3, ""], [10, "(a:2)"]]),
    ("a [b : c : 1] d", [[1, "a b  d"], [10, "a  c  d"]]),
    ("a[b:[c:d:2]:1]e", [[1, "abe"], [2, "ace"], [10, "ade"]]),
    ("a [unbalanced", [[10, "a [unbalanced"]]),
    ("a [b:.5] c", [[5, "a  c"], [10, "a b c"]]),
    ("((a][:b:c [d:3]", [[3, "((a][:b:c "], [10, "((a][:b:c d"]]),
    ("[a|(b:1.1)]", alternating("a", "(b:1.1)")),
    ("[fe|]male", alternating("female", "male")),
    ("[fe|||]male", [[i, "female" if i % 4 == 1 else "male"] for i in range(1, 11)]),
    ("[|a]", alternating("", "a")),
])
def test_webui_doctests(prompt, expected):
    assert g(prompt) == expected


def test_unsupported_doctest_follows_current_webui():
    # webui's own doctest expects [[5,'a  c'],[10,'a {b|d{ c']] but has failed since alternation
    # landed; 1.10 returns the prompt unchanged (a `|` outside an alternation is a parse error).
    assert g("a [{b|d{:.5] c") == [[10, "a [{b|d{:.5] c"]]


@pytest.mark.parametrize("prompt, steps, expected", [
    ("[a:b:10]", 10, [[10, "a"]]),
    ("[a:b:0]", 10, [[10, "b"]]),
    ("[a:b:-0.5]", 10, [[10, "b"]]),
    ("[a:b:2.5]", 4, [[4, "a"]]),
    ("[b:1.5]", 10, [[10, ""]]),  # dotted >= 1 is a fraction: 15 steps, clamped, never happens
    ("[a:b:1.0]", 10, [[10, "a"]]),
    ("[a:b:1e-1]", 10, [[10, "b"]]),  # exponent without dot: absolute step int(0.1) = 0
    ("[a\\:b:3]", 10, [[3, ""], [10, "a\\:b"]]),
    ("(a:[b:c:2])", 10, [[2, "(a:b)"], [10, "(a:c)"]]),
    ("[(a:1.2):b:3]", 10, [[3, "(a:1.2)"], [10, "b"]]),
    ("a [b:c:3] AND d", 10, [[3, "a b AND d"], [10, "a c AND d"]]),
    ("[a:b :3]", 10, [[3, "a"], [10, "b "]]),
    ("[:to:3]", 10, [[3, ""], [10, "to"]]),
    ("[from::3]", 10, [[3, "from"], [10, ""]]),
    ("\\[a:b:3\\]", 10, [[10, "\\[a:b:3\\]"]]),
    ("a b]", 10, [[10, "a b]"]]),
    ("a|b", 10, [[10, "a|b"]]),
    ("[a:b:c:3]", 10, [[10, "[a:b:c:3]"]]),
    ("a [b:c", 10, [[10, "a [b:c"]]),
    ("[a:b:+3]", 10, [[3, "a"], [10, "b"]]),
])
def test_edge_cases(prompt, steps, expected):
    assert g(prompt, steps) == expected


def test_module_comment_example_boundaries():
    prompt = ("fantasy landscape with a [mountain:lake:0.25] and [an oak:a christmas tree:0.75]"
              "[ in foreground::0.6][: in background:0.25] [shoddy:masterful:0.5]")
    schedule = g(prompt, 100)
    assert [step for step, _ in schedule] == [25, 50, 60, 75, 100]
    assert schedule[0][1] == "fantasy landscape with a mountain and an oak in foreground shoddy"
    assert schedule[-1][1] == "fantasy landscape with a lake and a christmas tree in background masterful"


def test_hires_pass_timeline():
    assert g("a [b:.5] c", 10, hires=10) == [[10, "a b c"]]
    assert g("a [b:1.5] c", 10, hires=10) == [[5, "a  c"], [10, "a b c"]]
    # integers count from the start of the first pass
    assert g("[a:b:15]", 10, hires=20) == [[5, "a"], [20, "b"]]


def test_old_scheduling():
    assert g("[b:1.5]", 10, old=True) == [[1, ""], [10, "b"]]
    assert g("[b:0.5]", 10, old=True) == [[5, ""], [10, "b"]]
    # old timelines ignore hires_steps
    assert g("[b:0.5]", 10, hires=30, old=True) == [[5, ""], [10, "b"]]


def test_batch_keeps_input_order_and_duplicates():
    result = get_learned_conditioning_prompt_schedules(["a", "[b:2]", "a"], 4)
    assert result == [[[4, "a"]], [[2, ""], [4, "b"]], [[4, "a"]]]


# --- the run-compression speed-up of the Earley reference must not change any result ----------

from hypothesis import given, settings, strategies as st  # noqa: E402

from comfy_core.prompt.schedule import render_schedule  # noqa: E402
from comfy_core.prompt.schedule_earley import compress_runs, parse_earley  # noqa: E402


def earley_schedule(prompt, steps, *, compress):
    """The schedule from webui's Earley parse (optionally without run compression)."""
    tree = parse_earley(prompt, compress=compress)
    if tree is None:
        return [[steps, prompt]]
    return render_schedule(tree, steps, base_steps=steps)


def test_compress_runs_maps_positions():
    short, positions = compress_runs("abc  dx:1.5  x")
    assert short == "a d:1.5 x"
    assert [positions[i] for i in range(len(short) + 1)] == [0, 3, 5, 7, 8, 9, 10, 11, 13, 14]


@pytest.mark.parametrize("prompt", [
    "a [mountain:lake:0.25] and [an oak:a christmas tree:0.75][ in foreground::0.6]",
    "word\\[x:y:3] [word\\ more:5]", "[ab  cd|ef\\gh|  ] tail", "[long words here:.5e1]",
    "eee [eee:EEE:1e1] e", "[x:  12  ]", "a\\\nb [c:d:2]", "((abc][:def:ghi [jkl:3]",
    "[abc:1]]]", "(xyz[abc:2])]",
])
def test_compression_matches_direct_parse(prompt):
    assert earley_schedule(prompt, 10, compress=True) == earley_schedule(prompt, 10, compress=False)
    assert g(prompt) == earley_schedule(prompt, 10, compress=False)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["ab", "cd ", "  ", "e", "E", "1", ".5", "+", "-", ":", "[", "]", "(", ")",
                                 "|", "\\", "\\[", "x\ty", "BREAK", "\n"]), max_size=14).map("".join))
def test_compression_matches_direct_parse_fuzzed(prompt):
    assert earley_schedule(prompt, 6, compress=True) == earley_schedule(prompt, 6, compress=False)
