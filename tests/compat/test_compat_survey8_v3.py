"""Round 8 survey gaps in the V3 API (comfy_api.latest): GET_SCHEMA / FINALIZE_SCHEMA /
VALIDATE_CLASS on node classes (comfyui-timesaver's loader), ui.ImageSaveHelper (1hewNodes'
SaveImage), and hidden inputs that share a real input's name (timesaver's
TS_ImagePromptInjector) -- behaviour of ComfyUI's comfy_api/latest/_io.py and _ui.py."""
from __future__ import annotations

import pytest
import torch


def _prompt_injector():
    """As timesaver's TS_ImagePromptInjector declares it: a `prompt` input plus Hidden.prompt."""
    from comfy_api.latest import io

    class Injector(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="S8Injector", category="test",
                             inputs=[io.Image.Input("image"), io.String.Input("prompt", default="")],
                             outputs=[io.Image.Output(), io.String.Output()],
                             hidden=[io.Hidden.prompt, io.Hidden.unique_id])

        @classmethod
        def execute(cls, image, prompt):
            return io.NodeOutput(image, f"{prompt}|{sorted(cls.hidden.prompt)}|{cls.hidden.unique_id}")

    return Injector


def test_get_schema_validates_and_returns_the_schema_as_comfyui_loaders_call_it(session):
    """timesaver's get_node_list calls node_cls.GET_SCHEMA() on each class and drops any that raise."""
    from comfy_api.latest import io

    node = _prompt_injector()
    schema = node.GET_SCHEMA()
    assert isinstance(schema, io.Schema) and schema.node_id == "S8Injector"
    assert [i.id for i in schema.inputs] == ["image", "prompt"]
    final = node.FINALIZE_SCHEMA()
    assert isinstance(final, io.Schema) and final.node_id == "S8Injector"
    node.VALIDATE_CLASS()

    class NoExecute(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="S8NoExec", inputs=[], outputs=[])

    with pytest.raises(Exception, match="execute"):
        NoExecute.GET_SCHEMA()

    class Dupes(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="S8Dupes", inputs=[io.Int.Input("x"), io.Int.Input("x")], outputs=[])

        @classmethod
        def execute(cls, x):
            return io.NodeOutput()

    with pytest.raises(ValueError, match="unique"):
        Dupes.GET_SCHEMA()

    class Subclass(node):  # a subclass inheriting define_schema and execute is valid
        pass

    assert Subclass.GET_SCHEMA().node_id == "S8Injector"


def test_hidden_input_named_like_a_real_input_registers_and_stays_apart(session):
    """ComfyUI checks id uniqueness among inputs and outputs only; Hidden.prompt goes to
    cls.hidden.prompt, the `prompt` string input to execute()."""
    from compat.v3.adapter import spec_from_v3

    spec = spec_from_v3(_prompt_injector())
    image = torch.zeros(1, 2, 2, 3)
    hidden_keys = [i.name for i in spec.inputs if i.section == "hidden"]
    assert "prompt" not in hidden_keys and "unique_id" in hidden_keys
    kwargs = {"image": image, "prompt": "a cat", "unique_id": "7",
              **{k: {"1": {}, "2": {}} for k in hidden_keys if k != "unique_id"}}
    out = spec.behaviour.call(None, **kwargs)
    assert out["result"][1] == "a cat|['1', '2']|7"


def test_image_save_helper_writes_pngs_with_metadata(session, tmp_path):
    """1hew_SaveImage: ui.ImageSaveHelper.save_images(image, filename_prefix=..., folder_type=
    io.FolderType.temp, cls=..., compress_level=4); get_save_images_ui into the output folder."""
    import numpy as np
    from PIL import Image

    from comfy_api.latest import io, ui
    from compat.v3.io import HiddenHolder

    class Node:
        hidden = HiddenHolder(prompt={"1": {"class_type": "X"}}, extra_pnginfo={"workflow": {"n": 1}})

    images = torch.rand(2, 3, 5, 3)
    results = ui.ImageSaveHelper.save_images(images, filename_prefix="sub/pic_%batch_num%",
                                             folder_type=io.FolderType.temp, cls=Node, compress_level=4)
    assert [r["type"] for r in results] == ["temp", "temp"]
    assert [r["filename"] for r in results] == ["pic_0_00001_.png", "pic_1_00002_.png"]
    assert all(r["subfolder"] == "sub" for r in results)
    for i, r in enumerate(results):
        with Image.open(tmp_path / "temp" / "sub" / r["filename"]) as img:
            assert img.size == (5, 3)
            assert img.text == {"prompt": '{"1": {"class_type": "X"}}', "workflow": '{"n": 1}'}
            expected = np.clip(255.0 * images[i].numpy(), 0, 255).astype(np.uint8)
            assert np.array_equal(np.asarray(img), expected)
    saved = ui.ImageSaveHelper.get_save_images_ui(torch.rand(1, 4, 4, 3), "ComfyUI", cls=None)
    record = saved.as_dict()["images"][0]
    assert record["type"] == "output" and (tmp_path / "output" / record["filename"]).is_file()
    assert saved.as_dict()["animated"] == [False]


def test_pack_subclass_of_a_builtin_v3_node_registers_and_runs(session):
    """cg-sigmas: `class Flux2Sigmas(Flux2Scheduler)` (comfy_extras.nodes_flux) with its own
    define_schema and the inherited execute is a V3 node on ComfyUI, where Flux2Scheduler is an
    io.ComfyNode subclass."""
    import nodes
    from comfy_api.latest import io
    from comfy_extras.nodes_flux import Flux2Scheduler

    from compat.v3.adapter import spec_from_v3

    assert issubclass(Flux2Scheduler, io.ComfyNode)
    assert Flux2Scheduler.GET_SCHEMA().node_id == "Flux2Scheduler"

    class Flux2Sigmas(Flux2Scheduler):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="S8Flux2Sigmas", category="quicknodes/sigmas",
                             inputs=[io.Int.Input("steps", default=20, min=1, max=4096),
                                     io.Int.Input("width", default=1024, min=16, max=nodes.MAX_RESOLUTION),
                                     io.Int.Input("height", default=1024, min=16, max=nodes.MAX_RESOLUTION)],
                             outputs=[io.Sigmas.Output("sigmas", display_name="sigmas")])

    assert Flux2Sigmas.GET_SCHEMA().node_id == "S8Flux2Sigmas"
    spec = spec_from_v3(Flux2Sigmas, python_module="custom_nodes.cg-sigmas")
    assert spec.node_id == "S8Flux2Sigmas" and [o.type for o in spec.outputs] == ["SIGMAS"]
    (sigmas,) = spec.behaviour.call(None, steps=4, width=512, height=512)["result"]
    (expected,) = Flux2Scheduler.execute(steps=4, width=512, height=512)
    assert isinstance(sigmas, torch.Tensor) and sigmas.shape == (5,)
    assert torch.equal(sigmas, expected) and float(sigmas[-1]) == 0.0
    assert bool((sigmas[:-1] > sigmas[1:]).all())  # a descending schedule down to zero


def test_builtin_v3_facade_keeps_its_v1_face(session):
    """Facades of V1-today nodes stay plain V1 classes; V3-today ones gain ComfyNode's face too."""
    import nodes
    from comfy_api.latest import io
    from comfy_extras.nodes_flux import Flux2Scheduler

    assert not issubclass(nodes.KSampler, io.ComfyNode)
    assert Flux2Scheduler.FUNCTION == "EXECUTE_NORMALIZED"
    assert Flux2Scheduler.RETURN_TYPES == ("SIGMAS",)
    result = Flux2Scheduler.EXECUTE_NORMALIZED(steps=2, width=256, height=256)
    assert result[0].shape == (3,)


def test_image_save_helper_animated_png_and_webp(session, tmp_path):
    """ImageSaveHelper.get_save_animated_png_ui / get_save_animated_webp_ui: one file per batch."""
    from PIL import Image

    from comfy_api.latest import io, ui
    from compat.v3.io import HiddenHolder

    class Node:
        hidden = HiddenHolder(prompt={"1": {}}, extra_pnginfo={"workflow": {"w": 2}})

    frames = torch.rand(3, 6, 8, 3)
    apng = ui.ImageSaveHelper.get_save_animated_png_ui(frames, "anim", cls=Node, fps=10.0, compress_level=4)
    record = apng.as_dict()
    assert record["animated"] == [True] and len(record["images"]) == 1
    with Image.open(tmp_path / "output" / record["images"][0]["filename"]) as img:
        assert img.n_frames == 3 and img.size == (8, 6) and img.info["duration"] == 100
        assert img.text["prompt"] == '{"1": {}}'
    webp = ui.ImageSaveHelper.save_animated_webp(frames, "anim", io.FolderType.temp, Node, 4.0, True, 90, 4)
    assert webp["type"] == "temp" and webp["filename"].endswith("_.webp")
    with Image.open(tmp_path / "temp" / webp["filename"]) as img:
        assert img.n_frames == 3 and img.size == (8, 6)
        assert img.getexif()[0x0110] == 'prompt:{"1": {}}' and img.getexif()[0x010F] == 'workflow:{"w": 2}'
    single = ui.ImageSaveHelper.get_save_animated_webp_ui(frames[:1], "one", None, 1.0, False, 80, 0)
    assert single.as_dict()["animated"] == [False]



async def test_a_hidden_entry_written_as_a_tuple_is_listed_and_never_passed():
    """RealtimeNodes' `"hidden": {"unique_id": ("UNIQUE_ID",)}`: ComfyUI compares hidden entries
    with the kind strings, so a tuple gets nothing (FloatControl's FUNCTION takes no unique_id)."""
    import json

    from graph.executor import Executor
    from graph.object_info import node_info
    from graph.registry import Registry
    from tests.graph.helpers import node, run_prompt

    received = []

    class FloatControl:
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"value": ("FLOAT", {"default": 0.5})},
                    "hidden": {"unique_id": ("UNIQUE_ID",), "prompt": "PROMPT"}}

        RETURN_TYPES = ("FLOAT",)
        FUNCTION = "update_value"
        OUTPUT_NODE = True

        def update_value(self, value, prompt=None):
            received.append((value, prompt is not None))
            return {"ui": {"value": [value]}, "result": (value,)}

    registry = Registry()
    spec = registry.add_v1("S8FloatControl", FloatControl)
    info = json.loads(json.dumps(node_info(spec)))
    assert info["input"]["hidden"] == {"unique_id": ["UNIQUE_ID"], "prompt": "PROMPT"}
    outcome = await run_prompt(Executor(registry), {"1": node("S8FloatControl", value=0.25)})
    assert outcome.status == "success", outcome.error
    assert received == [(0.25, True)]  # the string entry is passed, the tuple one is not
