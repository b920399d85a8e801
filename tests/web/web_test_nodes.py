"""Tiny native nodes for the server tests: constants, a slow counter with progress and previews,
an output node that writes a PNG, a failing node, a custom-event sender. No models, no torch."""
from __future__ import annotations

import threading

from graph.context import current
from graph.native import Float, Input, Int, Output, String, node


@node("WebTestConst", category="test", inputs=[Int("value", default=1, min=0, max=1000)], outputs=[Output("INT")])
def web_test_const(value: int):
    return (value,)


@node("WebTestAdd", category="test", inputs=[Input("a", "INT"), Input("b", "INT")], outputs=[Output("INT")])
def web_test_add(a: int, b: int):
    return (a + b,)


@node("WebTestSlow", category="test",
      inputs=[Input("value", "INT"), Int("steps", default=3, min=1, max=100000),
              Float("delay", default=0.0, min=0.0, max=10.0), Int("preview", default=0, min=0, max=1),
              String("tag", default="")],
      outputs=[Output("INT")])
def web_test_slow(value: int, steps: int, delay: float, preview: int, tag: str):
    """Counts to `steps`, reporting progress (and a small preview image) on each step."""
    ctx = current()
    waiter = threading.Event()
    for step in range(1, steps + 1):
        if delay:
            waiter.wait(delay)
        image = None
        if preview:
            from PIL import Image
            image = ("JPEG", Image.new("RGB", (16, 8), (255, 0, 0)), 512)
        ctx.progress(step, steps, image)
    return (value + steps,)


@node("WebTestOutput", category="test", output_node=True,
      inputs=[Input("value", "INT"), String("filename_prefix", default="webtest")], outputs=[])
def web_test_output(value: int, filename_prefix: str):
    """Writes a 4x4 PNG whose red channel is `value` into the output folder."""
    from PIL import Image

    from nodes.environment import current_env

    env = current_env()
    env.output_dir.mkdir(parents=True, exist_ok=True)
    name = f"{filename_prefix}_{value:05d}.png"
    Image.new("RGB", (4, 4), (value % 256, 0, 0)).save(env.output_dir / name)
    return {"ui": {"images": [{"filename": name, "subfolder": "", "type": "output"}], "values": [value]},
            "result": ()}


@node("WebTestFail", category="test", inputs=[Input("value", "INT"), String("message", default="boom")],
      outputs=[Output("INT")])
def web_test_fail(value: int, message: str):
    raise RuntimeError(message)


@node("WebTestEvent", category="test", output_node=True, inputs=[Input("value", "INT")], outputs=[])
def web_test_event(value: int):
    current().send("webtest.custom", {"value": value})
    return {"ui": {"values": [value]}, "result": ()}


ALL = [web_test_const, web_test_add, web_test_slow, web_test_output, web_test_fail, web_test_event]


def make_test_registry():
    from graph.registry import Registry

    registry = Registry()
    for fn in ALL:
        registry.add_native(fn, builtin=True)
    return registry
