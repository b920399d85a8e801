"""The rest of `comfy_api` packs import (KJNodes, ...): `io.MatchType` / `io.FolderType` / `io.BBOX`,
`ui.PreviewVideo`, `InputImpl` / `Types` (video values), `feature_flags` over
`PromptServer.instance.sockets_metadata`, and `torch_helpers.set_torch_compile_wrapper`."""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch


def test_matchtype_inputs_take_the_templates_types_and_the_output_follows(session):
    from comfy_api.latest import io

    from compat.v3.adapter import spec_from_v3
    from graph.object_info import node_info
    from graph.types import types_match

    template = io.MatchType.Template("image_or_mask", allowed_types=[io.Image, io.Mask])

    class Pick(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="Pick", category="t",
                             inputs=[io.MatchType.Input("a", template=template), io.BBOX.Input("box", optional=True)],
                             outputs=[io.MatchType.Output(template, display_name="output"),  # later ComfyUI's order
                                      io.MatchType.Output("same", io.MatchType.Template("one", io.Image))])

        @classmethod
        def execute(cls, a, box=None):
            return io.NodeOutput(a, a)

    info = node_info(spec_from_v3(Pick))
    # today's ComfyUI: the socket type is COMFY_MATCHTYPE_V3, the template travels in the options
    # and output_matchtypes names each output's template (the editor narrows the types)
    assert info["input"]["required"]["a"] == ["COMFY_MATCHTYPE_V3", {
        "template": {"template_id": "image_or_mask", "allowed_types": "IMAGE,MASK"}}]
    assert info["input"]["optional"]["box"][0] == "BBOX"
    assert info["output"] == ["COMFY_MATCHTYPE_V3"] * 2 and info["output_name"] == ["output", "same"]
    assert info["output_matchtypes"] == ["image_or_mask", "one"]
    assert types_match("MASK", "COMFY_MATCHTYPE_V3") and types_match("COMFY_MATCHTYPE_V3", "IMAGE")
    assert template.as_dict() == {"template_id": "image_or_mask", "allowed_types": "IMAGE,MASK"}
    with pytest.raises(io.SchemaError, match="MatchType.Template"):
        io.MatchType.Input("a", template="not a template")


def test_folder_types_saved_results_and_preview_video(session):
    from comfy_api.latest import io, ui

    saved = ui.SavedResult("clip.mp4", "sub", io.FolderType.output)
    assert saved == {"filename": "clip.mp4", "subfolder": "sub", "type": "output"} and saved.filename == "clip.mp4"
    assert ui.PreviewVideo([saved]).as_dict() == {"images": [dict(saved)], "animated": (True,)}
    assert io.UploadType.video.value == "video_upload" and ui.FolderType is io.FolderType
    preview = ui.PreviewAudio({"waveform": torch.zeros(1, 1, 800), "sample_rate": 8000}).as_dict()
    (entry,) = preview["audio"]
    assert entry["type"] == "temp" and entry["filename"].startswith("ComfyUI_temp_") and entry["filename"].endswith(".flac")


def test_video_types_and_components(session):
    from comfy_api.latest import InputImpl, Types

    assert Types.VideoContainer.as_input() == ["auto", "mp4", "mkv", "webm"]  # today's (2026) choices
    assert Types.VideoCodec.as_input() == ["auto", "h264", "av1"]
    assert Types.VideoContainer.get_extension("auto") == "mp4"
    frames = torch.rand(6, 4, 5, 3)
    video = InputImpl.VideoFromComponents(Types.VideoComponents(images=frames, frame_rate=Fraction(3)))
    assert video.get_dimensions() == (5, 4) and video.get_duration() == 2.0
    assert video.get_components().images is frames


def test_feature_flags_read_the_clients_flags(session):
    from comfy_api import feature_flags
    from server import PromptServer

    metadata = {"a": {"feature_flags": {"supports_preview_metadata": True}}, "b": {"feature_flags": {}}}
    assert feature_flags.supports_feature(metadata, "a", "supports_preview_metadata") is True
    assert feature_flags.supports_feature(metadata, "b", "supports_preview_metadata") is False
    assert feature_flags.get_connection_feature(metadata, "nobody", "x", default=7) == 7
    assert feature_flags.get_server_features() == {"supports_preview_metadata": True, "max_upload_size": 100 * 1024 ** 2,
                                                   "node_replacements": True, "assets": False}
    assert PromptServer.instance.sockets_metadata == {}  # no server: no clients


def test_set_torch_compile_wrapper_swaps_the_compiled_module_in_for_each_call(session):
    from comfy_api.torch_helpers import set_torch_compile_wrapper

    from comfy_core.wrappers import WrapperExecutor, WrappersMP

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.diffusion_model = torch.nn.Linear(2, 2)

    class Patcher:  # the four members ComfyUI's helper uses on a ModelPatcher
        def __init__(self):
            self.model = Holder()
            self.model_options = {}
            self.wrappers: dict = {}

        def get_model_object(self, name):
            return getattr(self.model, name)

        def add_wrapper_with_key(self, kind, key, fn):
            self.wrappers.setdefault(kind, {}).setdefault(key, []).append(fn)

        def remove_wrappers_with_key(self, kind, key):
            self.wrappers.get(kind, {}).pop(key, None)

    patcher = Patcher()
    original = patcher.model.diffusion_model
    set_torch_compile_wrapper(patcher, backend="eager")
    set_torch_compile_wrapper(patcher, backend="eager")  # a second call replaces the first wrapper
    wrappers = patcher.wrappers[WrappersMP.APPLY_MODEL]["torch.compile"]
    assert len(wrappers) == 1 and patcher.model_options["torch_compile_kwargs"]["backend"] == "eager"
    during = WrapperExecutor.new_class_executor(lambda: patcher.model.diffusion_model, patcher.model,
                                                wrappers).execute()
    assert during is not original and getattr(during, "_orig_mod", None) is original  # the compiled module
    assert patcher.model.diffusion_model is original  # put back after the call
