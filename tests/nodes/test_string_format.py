"""StringFormat and JsonExtractString (ComfyUI's nodes_string.py, 2026)."""
from __future__ import annotations

import pytest

from nodes.errors import NodeInputError
from nodes.string_format import json_extract_string, string_format
from tests.nodes.workflow_2026 import Runner, node


@pytest.mark.parametrize("f_string, values, text", [
    ("{a}", {"a": 5}, "5"), ("{a:.2f} and {b!r}", {"a": 1.0, "b": "x"}, "1.00 and 'x'"),
    ("{a[1]}-{b.real}", {"a": [1, 2], "b": 3}, "2-3"), ("{{a}}", {}, "{a}"), ("{a:>{b}}", {"a": "x", "b": 3}, "  x"),
])
def test_python_format_rules(f_string, values, text):
    assert string_format(values, f_string) == (text,)


@pytest.mark.parametrize("f_string", ["{a.__class__}", "{a.__init__.__globals__}", "{a[_x]}", "{b}", "{}", "{a"])
def test_private_names_unlinked_fields_and_bad_syntax_are_errors(f_string):
    with pytest.raises(NodeInputError):
        string_format({"a": {"_x": 1}}, f_string)


@pytest.mark.parametrize("text, key, value", [
    ('{"a": "x", "n": 3}', "a", "x"), ('{"a": "x", "n": 3}', "n", "3"), ('{"a": null}', "a", ""),
    ('{"a": 1}', "missing", ""), ('Here:\n```json\n{"w": [1, 2]}\n```', "w", "[1, 2]"),
    ('{broken {"k": true}', "k", "True"), ("no json", "k", ""),
])
def test_json_extract(text, key, value):
    assert json_extract_string(text, key) == (value,)


async def test_growing_values_as_the_editor_sends_them(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"n": node("PrimitiveInt", value=7), "s": node("PrimitiveString", value="cat"),
              "f": node("StringFormat", f_string="{b} x{a:03d}", **{"values.a": ["n", 0], "values.b": ["s", 0]}),
              "j": node("JsonExtractString", json_string='{"k": "v"}', key="k"),
              "o": node("PreviewAny", source=["f", 0]), "p": node("PreviewAny", source=["j", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["o"] == {"text": ["cat x007"]} and out.ui_outputs["p"] == {"text": ["v"]}
