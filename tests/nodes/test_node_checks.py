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
