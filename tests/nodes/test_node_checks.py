"""The shared input checks and the one node-input error: the node comes from the running context."""
from __future__ import annotations

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes import checks
from nodes.errors import NodeInputError


def test_the_error_names_the_running_node_the_input_and_what_was_wrong():
    ctx = NodeContext("p", "7", "7", None, None, class_type="KSampler")
    token = set_current(ctx)
    try:
        with pytest.raises(NodeInputError) as err:
            checks.latent("nope", "latent_image")
    finally:
        reset_current(token)
    assert str(err.value) == "KSampler (node 7): input 'latent_image' expected a LATENT ({'samples': tensor}), received str"
    assert (err.value.node_id, err.value.input_name) == ("7", "latent_image") and isinstance(err.value, ValueError)


def test_outside_a_node_the_message_starts_at_the_input():
    with pytest.raises(NodeInputError, match=r"^input 'images' expected an IMAGE tensor \[B, H, W, C\] with C = 1, 3 or 4, "
                                             r"received Tensor of shape \[1, 4, 4, 2\]$"):
        checks.image_batch(torch.zeros(1, 4, 4, 2))


def test_checks_accept_comfyui_shapes_and_refuse_others():
    assert checks.image_batch(torch.zeros(2, 4, 4, 3)).shape == (2, 4, 4, 3)
    assert checks.mask_batch(torch.zeros(4, 5)).shape == (1, 4, 5)
    assert checks.latent({"samples": torch.zeros(1, 4, 2, 2)}).shape == (1, 4, 2, 2)
    cond = [[torch.zeros(1, 77, 8), {}]]
    assert checks.conditioning(cond) is cond
    for check, bad in [(checks.mask_batch, torch.zeros(4)), (checks.latent, {"samples": torch.zeros(4, 4)}),
                       (checks.conditioning, [torch.zeros(1)]), (checks.clip, None), (checks.clip, "x"),
                       (checks.model, 3), (checks.vae, None), (checks.image_batch, torch.zeros(0, 4, 4, 3))]:
        with pytest.raises(NodeInputError):
            check(bad)


async def test_a_node_run_by_the_executor_is_named_in_its_input_error(tmp_path):
    """The executor puts the node's id and type in its context: the error names the node as the
    editor shows it, with no name passed by the node function."""
    from graph.executor import Executor
    from graph.native import Input, Output, node
    from graph.registry import Registry

    @node("NeedsLatent", inputs=[Input("samples", "*")], outputs=[Output("LATENT")])
    def needs_latent(samples):
        checks.latent(samples)
        return (samples,)

    registry = Registry()
    registry.add_native(needs_latent)
    events = []
    outcome = await Executor(registry).execute({"5": {"class_type": "NeedsLatent", "inputs": {"samples": "x"}}}, "p",
                                               outputs=["5"], extra_data={}, sink=events.append, interrupt=None)
    assert outcome.status == "error"
    error = next(e.data for e in events if e.type == "execution_error")
    assert error["exception_message"].startswith("NeedsLatent (node 5): input 'samples' expected a LATENT")


def test_numbers_strings_and_choices_name_the_input_and_the_range():
    assert checks.integer(7, "steps", 1, 10) == 7 and checks.integer(0, "x", 0) == 0
    assert checks.number(0.5, "denoise", 0.0, 1.0) == 0.5 and checks.number(3, "cfg", 0.0) == 3
    assert checks.text("a cat") == "a cat"
    for call, message in [
            (lambda: checks.integer(True, "width", 0, 8), r"^input 'width' expected an INT in 0\.\.8, received True$"),
            (lambda: checks.integer(2.0, "amount", 1), r"^input 'amount' expected an INT >= 1, received 2\.0$"),
            (lambda: checks.integer(-1, "overlap", 0), r"^input 'overlap' expected an INT >= 0, received -1$"),
            (lambda: checks.number(float("nan"), "start", 0.0, 1.0), r"^input 'start' expected a FLOAT in 0\.0\.\.1\.0"),
            (lambda: checks.number(-0.5, "strength", 0.0), r"^input 'strength' expected a FLOAT >= 0\.0, received -0\.5$"),
            (lambda: checks.text(3, "text_l"), r"^input 'text_l' expected a STRING, received int$")]:
        with pytest.raises(NodeInputError, match=message):
            call()


def test_shape_options_of_the_latent_mask_and_conditioning_checks():
    video = {"samples": torch.zeros(1, 4, 2, 2, 2)}
    assert checks.latent(video).ndim == 5
    with pytest.raises(NodeInputError, match=r"expected LATENT samples \[B, C, h, w\], received Tensor of shape"):
        checks.latent(video, ndims=(4,))
    with pytest.raises(NodeInputError, match=r"'mask' expected a MASK tensor \[B, H, W\] or \[H, W\]"):
        checks.mask_batch(torch.zeros(2, 1, 4, 4))
    assert checks.mask_batch(torch.zeros(2, 1, 4, 4), ndims=(3, 2, 4)).shape == (2, 4, 4)
    with pytest.raises(NodeInputError, match=r"received entry 1: \[Tensor of shape \[77, 8\], dict\]"):
        checks.conditioning([[torch.zeros(1, 77, 8), {}], [torch.zeros(77, 8), {}]], tokens=True)
    assert len(checks.conditioning([[torch.zeros(77, 8), {}]])) == 1  # only the token nodes need [B, T, W]
    with pytest.raises(NodeInputError, match="'conditioning_from' expected at least one conditioning entry"):
        checks.conditioning([], "conditioning_from", non_empty=True)


def test_the_clip_check_for_the_a1111_encoders_wants_this_engines_clip():
    class ApiOnly:
        def tokenize(self, text): ...

        def encode_from_tokens(self, tokens): ...

    clip = ApiOnly()
    assert checks.clip(clip) is clip
    with pytest.raises(NodeInputError, match="'clip' expected a CLIP object of this engine"):
        checks.clip(clip, encoders=True)


def test_image_helper_errors_become_the_running_nodes_input_error(tmp_path):
    """comfy_core's image helpers name no node; inside `image_input_errors()` a node's call
    re-raises them naming the node, as every node input error does."""
    from comfy_core.image.errors import ImageInputError
    from comfy_core.image.file_names import confined_file
    from nodes.errors import image_input_errors

    with pytest.raises(ImageInputError, match=r"^input 'image' expected a file name inside its folder"):
        confined_file(tmp_path, "../x.png", input_name="image")
    token = set_current(NodeContext("p", "4", "4", None, None, class_type="LoadImage"))
    try:
        with pytest.raises(NodeInputError, match=r"^LoadImage \(node 4\): input 'image' expected a file name inside"):
            with image_input_errors():
                confined_file(tmp_path, "../x.png", input_name="image")
    finally:
        reset_current(token)
