"""The primitive nodes (ComfyUI's nodes_primitive.py): each passes its value on; the widgets are
declared as ComfyUI's (no default, +-sys.maxsize); wrong kinds are refused."""
from __future__ import annotations

import sys

import pytest

from graph.native import spec_of
from nodes.errors import NodeInputError
from nodes.primitive import (
    primitive_boolean,
    primitive_float,
    primitive_int,
    primitive_string,
    primitive_string_multiline,
)


def test_values_pass_through():
    assert primitive_string("a") == ("a",)
    assert primitive_string_multiline("a\nb") == ("a\nb",)
    assert primitive_int(-sys.maxsize) == (-sys.maxsize,)
    assert primitive_float(2.5) == (2.5,) and primitive_float(3) == (3,)
    assert primitive_boolean(False) == (False,)


def test_widgets_have_comfyuis_options():
    assert dict(spec_of(primitive_int).input("value").options) == {
        "min": -sys.maxsize, "max": sys.maxsize, "control_after_generate": True}
    assert dict(spec_of(primitive_float).input("value").options) == {"min": -sys.maxsize, "max": sys.maxsize}
    assert dict(spec_of(primitive_string).input("value").options) == {"multiline": False}
    assert dict(spec_of(primitive_string_multiline).input("value").options) == {"multiline": True}


@pytest.mark.parametrize("fn, value", [(primitive_int, 1.5), (primitive_int, True), (primitive_float, "1"),
                                       (primitive_boolean, 1), (primitive_string, None)])
def test_wrong_kinds_are_refused(fn, value):
    with pytest.raises(NodeInputError) as info:
        fn(value)
    assert info.value.input_name == "value"
