"""Today's V3 io types for packs (compat/v3/io_types.py, compat/v3/io.py): every `@comfytype`
of ComfyUI's comfy_api/latest/_io.py @04e2a914 exists under its name and wire type, the widget
types render ComfyUI's `/object_info` options, and values of the new types flow through a run."""
from __future__ import annotations

import uuid

import pytest

from graph.executor import Executor
from graph.object_info import node_info
from graph.registry import Registry
from graph.validation import validate_prompt

# (name in `io`, io_type) of each @comfytype class in ComfyUI's _io.py @04e2a914 (MultiCombo is a
# second "COMBO" type; the dynamic ones are tested in test_compat_v3_dynamic.py)
COMFYUI_TYPES = [
    ("Boolean", "BOOLEAN"), ("Int", "INT"), ("Float", "FLOAT"), ("String", "STRING"), ("Combo", "COMBO"),
    ("MultiCombo", "COMBO"), ("Image", "IMAGE"), ("WanCameraEmbedding", "WAN_CAMERA_EMBEDDING"),
    ("Webcam", "WEBCAM"), ("Mask", "MASK"), ("Latent", "LATENT"), ("Conditioning", "CONDITIONING"),
    ("Sampler", "SAMPLER"), ("Sigmas", "SIGMAS"), ("Noise", "NOISE"), ("Guider", "GUIDER"), ("Clip", "CLIP"),
    ("ControlNet", "CONTROL_NET"), ("Vae", "VAE"), ("Model", "MODEL"), ("BackgroundRemoval", "BACKGROUND_REMOVAL"),
    ("ClipVision", "CLIP_VISION"), ("ClipVisionOutput", "CLIP_VISION_OUTPUT"), ("StyleModel", "STYLE_MODEL"),
    ("Gligen", "GLIGEN"), ("UpscaleModel", "UPSCALE_MODEL"), ("LatentUpscaleModel", "LATENT_UPSCALE_MODEL"),
    ("Audio", "AUDIO"), ("Video", "VIDEO"), ("SVG", "SVG"), ("LoraModel", "LORA_MODEL"), ("LossMap", "LOSS_MAP"),
    ("Voxel", "VOXEL"), ("Mesh", "MESH"), ("Splat", "SPLAT"), ("File3DAny", "FILE_3D"),
    ("File3DGLB", "FILE_3D_GLB"), ("File3DGLTF", "FILE_3D_GLTF"), ("File3DFBX", "FILE_3D_FBX"),
    ("File3DOBJ", "FILE_3D_OBJ"), ("File3DSTL", "FILE_3D_STL"), ("File3DUSDZ", "FILE_3D_USDZ"),
    ("File3DPLY", "FILE_3D_PLY"), ("File3DSPLAT", "FILE_3D_SPLAT"), ("File3DSPZ", "FILE_3D_SPZ"),
    ("File3DKSPLAT", "FILE_3D_KSPLAT"), ("File3DSplatAny", "FILE_3D_SPLAT_ANY"),
    ("File3DPointCloudAny", "FILE_3D_POINT_CLOUD_ANY"), ("Hooks", "HOOKS"), ("HookKeyframes", "HOOK_KEYFRAMES"),
    ("TimestepsRange", "TIMESTEPS_RANGE"), ("LatentOperation", "LATENT_OPERATION"), ("FlowControl", "FLOW_CONTROL"),
    ("Accumulation", "ACCUMULATION"), ("Load3DCamera", "LOAD3D_CAMERA"), ("Load3DModelInfo", "LOAD3D_MODEL_INFO"),
    ("Load3D", "LOAD_3D"), ("Load3DAnimation", "LOAD_3D_ANIMATION"), ("Layers", "LAYERS"),
    ("Compositor", "COMPOSITOR"), ("CameraInfoState", "CAMERA_INFO_STATE"), ("Photomaker", "PHOTOMAKER"),
    ("Point", "POINT"), ("FaceAnalysis", "FACE_ANALYSIS"), ("BBOX", "BBOX"), ("SEGS", "SEGS"), ("AnyType", "*"),
    ("ModelPatch", "MODEL_PATCH"), ("AudioEncoder", "AUDIO_ENCODER"), ("AudioEncoderOutput", "AUDIO_ENCODER_OUTPUT"),
    ("Tracks", "TRACKS"), ("Dict", "DICT"), ("Array", "ARRAY"), ("ImageCompare", "IMAGECOMPARE"),
    ("Color", "COLOR"), ("Colors", "COLORS"), ("BoundingBox", "BOUNDING_BOX"), ("Curve", "CURVE"),
    ("BoundingBoxes", "BOUNDING_BOXES"), ("VideoEdit", "VIDEO_EDIT"), ("ResolutionPreview", "RESOLUTION_PREVIEW"),
    ("Histogram", "HISTOGRAM"), ("Range", "RANGE"),
]

BOX_DEFAULT = {"x": 0, "y": 0, "width": 512, "height": 512}


def test_every_comfyui_type_is_in_io_under_its_name_and_wire_type(session):
    from comfy_api.latest import io
    from comfy_api.latest import _io

    missing = [name for name, _ in COMFYUI_TYPES if not hasattr(io, name)]
    assert missing == []
    assert [(n, getattr(io, n).io_type) for n, _ in COMFYUI_TYPES] == COMFYUI_TYPES
    for name, io_type in COMFYUI_TYPES:
        if name == "MultiCombo":
            continue  # input-only, as in ComfyUI
        assert getattr(io, name).Output().get_io_type() == io_type
        assert getattr(_io, name) is getattr(io, name)  # the private module packs import, too
    for name in ("ControlAfterGenerate", "RemoteOptions", "RemoteComboOptions", "RemoteItemSchema",
                 "ComfyTypeI", "ComfyTypeIO"):
        assert hasattr(io, name), name
    assert io.NumberDisplay.gradient_slider.value == "gradientslider"
    assert io.Model.Type is not None and io.BoundingBox.Type.__annotations__.keys() == {"x", "y", "width", "height"}


def _kj_style_nodes():
    """Declarations as the newest ComfyUI-KJNodes writes them (ideogram4_nodes.py, nodes.py)."""
    from comfy_api.latest import io, ui

    class TrackSource(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(
                node_id="TestTrackSource", category="test",
                inputs=[io.BoundingBox.Input("region", component="ImageCrop"),
                        io.Int.Input("points", default=2, min=1)],
                outputs=[io.Tracks.Output(), io.BoundingBox.Output(display_name="bboxes")])

        @classmethod
        def execute(cls, region, points):
            tracks = {"track_path": [[region["x"] + i, region["y"]] for i in range(points)],
                      "track_visibility": [True] * points}
            return io.NodeOutput(tracks, region)

    class TrackSink(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(
                node_id="TestTrackSink", category="test", is_output_node=True,
                inputs=[io.Tracks.Input("tracks"),
                        io.BoundingBox.Input("bboxes", optional=True, force_input=True,
                                             tooltip="Optional pixel-space boxes"),
                        io.BoundingBoxes.Input("boxes", optional=True),
                        io.Color.Input("color"),
                        io.Curve.Input("curve", optional=True),
                        io.Range.Input("range", optional=True, value_min=0.0, value_max=2.0)],
                outputs=[io.Tracks.Output(display_name="tracks")])

        @classmethod
        def execute(cls, tracks, color, bboxes=None, boxes=None, curve=None, range=None):  # noqa: A002
            text = f"{len(tracks['track_path'])} {bboxes} {boxes} {color} {range}"
            return io.NodeOutput(tracks, ui=ui.PreviewText(text))

    return TrackSource, TrackSink


def test_bounding_box_and_tracks_render_in_object_info_as_comfyui(session):
    from compat.v3.adapter import spec_from_v3

    source, sink = (spec_from_v3(c) for c in _kj_style_nodes())
    info = node_info(sink)
    # BoundingBox.Input: a socketless widget with ComfyUI's default box; force_input gives a socket
    assert info["input"]["optional"]["bboxes"] == ["BOUNDING_BOX", {
        "tooltip": "Optional pixel-space boxes", "default": BOX_DEFAULT, "socketless": True, "forceInput": True}]
    assert info["input"]["required"]["tracks"] == ["TRACKS", {}]
    assert info["input"]["required"]["color"] == ["COLOR", {"default": "#ffffff", "socketless": True}]
    assert info["input"]["optional"]["boxes"] == ["BOUNDING_BOXES", {"default": [], "socketless": True}]
    assert info["input"]["optional"]["curve"] == ["CURVE", {
        "default": {"points": [[0.0, 0.0], [1.0, 1.0]], "interpolation": "monotone_cubic"}, "socketless": True}]
    assert info["input"]["optional"]["range"] == ["RANGE", {
        "default": {"min": 0.0, "max": 1.0}, "socketless": True, "value_min": 0.0, "value_max": 2.0}]
    assert info["input_order"] == {"required": ["tracks", "color"], "optional": ["bboxes", "boxes", "curve", "range"],
                                   "hidden": ["prompt", "extra_pnginfo"]}
    assert (info["output"], info["output_name"]) == (["TRACKS"], ["tracks"])

    region = node_info(source)["input"]["required"]["region"]
    # the shape of ComfyUI's ImageCropV2 entry (tests/data/object_info_2026/ImageCropV2.json)
    assert region == ["BOUNDING_BOX", {"default": BOX_DEFAULT, "socketless": True, "component": "ImageCrop"}]
    assert (node_info(source)["output"], node_info(source)["output_name"]) == (
        ["TRACKS", "BOUNDING_BOX"], ["TRACKS", "bboxes"])


def test_v1_face_and_fresh_defaults(session):
    from comfy_api.latest import io

    _, sink = _kj_style_nodes()
    assert sink.INPUT_TYPES()["optional"]["bboxes"] == ("BOUNDING_BOX", {
        "tooltip": "Optional pixel-space boxes", "default": BOX_DEFAULT, "socketless": True, "forceInput": True})
    assert sink.RETURN_TYPES == ("TRACKS",)
    first, second = io.BoundingBox.Input("a"), io.BoundingBox.Input("b")
    first.options()["default"]["x"] = 7  # a node editing its own default leaves the others alone
    assert second.options()["default"] == BOX_DEFAULT
    assert io.BoundingBox.Input("c", default={"x": 1, "y": 2, "width": 3, "height": 4},
                                socketless=False).options() == {
        "default": {"x": 1, "y": 2, "width": 3, "height": 4}, "socketless": False}

    @io.comfytype(io_type="MY_BOX")
    class MyBox(io.BoundingBox):  # a pack's own type built on a widget type keeps the widget
        pass

    mine = MyBox.Input("box")
    assert mine.get_io_type() == "MY_BOX" and mine.options()["default"] == BOX_DEFAULT
    assert io.BoundingBox.Input("b").get_io_type() == "BOUNDING_BOX"  # the base type is left as it was
    assert io.Load3DAnimation.Output().get_io_type() == "LOAD_3D_ANIMATION"


async def test_values_of_the_new_types_flow_through_a_run(session):
    from compat.v3.adapter import spec_from_v3

    registry = Registry()
    for cls in _kj_style_nodes():
        registry.add_spec(spec_from_v3(cls))
    box = {"x": 3, "y": 5, "width": 8, "height": 8}
    prompt = {"1": {"class_type": "TestTrackSource", "inputs": {"region": box, "points": 3}},
              "2": {"class_type": "TestTrackSink", "inputs": {
                  "tracks": ["1", 0], "bboxes": ["1", 1], "color": "#ff0000",
                  "boxes": {"__value__": [box]}, "range": {"min": 0.2, "max": 0.8}}}}
    checked = await validate_prompt(prompt, registry)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(
        prompt, str(uuid.uuid4()), outputs=["2"])
    assert outcome.status == "success"
    assert outcome.ui_outputs["2"] == {
        "text": [f"3 {box} {[box]} #ff0000 {{'min': 0.2, 'max': 0.8}}"]}

    swapped = {**prompt, "2": {"class_type": "TestTrackSink",
                               "inputs": {"tracks": ["1", 1], "bboxes": ["1", 0], "color": "#ff0000"}}}
    bad = await validate_prompt(swapped, registry)
    assert not bad.ok
    assert {e["extra_info"]["input_name"] for e in bad.node_errors["2"]["errors"]
            if e["type"] == "return_type_mismatch"} == {"tracks", "bboxes"}


def test_other_widget_types_render_comfyui_options(session):
    from comfy_api.latest import io

    def entry(item):
        from compat.v3.io import input_spec_of

        spec = input_spec_of("N", item)
        return [spec.type if isinstance(spec.type, str) else "COMBO", dict(spec.options)], spec.section

    assert entry(io.VideoEdit.Input("edit", features=["trim"])) == (["VIDEO_EDIT", {
        "default": {"trim": {"start_time": 0.0, "duration": 0.0}}, "socketless": True, "features": ["trim"]}],
        "required")
    assert entry(io.ResolutionPreview.Input("preview")) == (["RESOLUTION_PREVIEW", {
        "socketless": True, "ratio_widget": "aspect_ratio", "megapixels_widget": "megapixels",
        "multiple_widget": "multiple"}], "optional")  # optional unless said otherwise, as in ComfyUI
    assert entry(io.ImageCompare.Input("compare_view")) == (["IMAGECOMPARE", {"socketless": True}], "required")
    assert entry(io.Compositor.Input("state")) == (["COMPOSITOR", {"default": {}, "socketless": True}], "required")
    assert entry(io.Colors.Input("palette")) == (["COLORS", {"default": [], "socketless": True}], "required")
    assert entry(io.Webcam.Input("cam")) == (["WEBCAM", {}], "required")
    assert entry(io.Curve.Input("c", default=[(0.0, 0.1), (1.0, 0.9)]))[0][1]["default"] == {
        "points": [[0.0, 0.1], [1.0, 0.9]], "interpolation": "monotone_cubic"}


def test_combo_variants(session):
    from comfy_api.latest import io

    from compat.v3.io import input_spec_of

    multi = input_spec_of("N", io.MultiCombo.Input("tags", options=["a", "b", "c"], default=["a"], chip=True))
    assert multi.type == ["a", "b", "c"]
    assert dict(multi.options) == {"default": ["a"], "multiselect": True, "multi_select": {"chip": True}}
    upload = io.Combo.Input("image", options=["x.png"], upload=io.UploadType.image,
                            image_folder=io.FolderType.input, control_after_generate=io.ControlAfterGenerate.fixed)
    assert upload.options() == {"image_upload": True, "image_folder": "input", "control_after_generate": "fixed",
                                "multiselect": False}
    assert io.Int.Input("seed", control_after_generate=io.ControlAfterGenerate.randomize).options() == {
        "control_after_generate": "randomize"}

    schema = io.RemoteItemSchema("voice_id", "{name} ({labels.accent})", preview_url_field="preview_url",
                                 preview_type="audio")
    remote = io.Combo.Input("voice", remote_combo=io.RemoteComboOptions("/proxy/voices", schema, refresh=0))
    spec = input_spec_of("N", remote)
    assert spec.type == "COMBO" and not spec.is_combo  # the editor fetches the choices; none to check here
    assert dict(spec.options) == {"remote_combo": {
        "route": "/proxy/voices", "refresh_button": True, "refresh": 0,
        "item_schema": {"value_field": "voice_id", "label_field": "{name} ({labels.accent})",
                        "preview_url_field": "preview_url", "preview_type": "audio"}}, "multiselect": False}
    listed = io.Combo.Input("model", options=["m1"], remote=io.RemoteOptions("/models", refresh_button=True))
    assert listed.values == ["m1"] and listed.options()["remote"] == {
        "route": "/models", "refresh_button": True, "control_after_refresh": "first"}
    assert io.Combo.Output(options=["a"]).options == ["a"] and io.Combo.Output().get_io_type() == "COMBO"


def test_remote_option_checks(session):
    from comfy_api.latest import io

    schema = io.RemoteItemSchema("id", "name")
    with pytest.raises(ValueError, match="route"):
        io.RemoteComboOptions("https://example.com/voices", schema)
    with pytest.raises(ValueError, match="refresh"):
        io.RemoteComboOptions("/voices", schema, refresh=50)
    with pytest.raises(ValueError, match="auto_select"):
        io.RemoteComboOptions("/voices", schema, auto_select="middle")
    with pytest.raises(ValueError, match="preview_type"):
        io.RemoteItemSchema("id", "name", preview_type="gif")
    with pytest.raises(ValueError, match="search_fields"):
        io.RemoteItemSchema("id", "name", search_fields=["{name}"])
    with pytest.raises(TypeError, match="not both"):
        io.Combo.Input("v", options=["a"], remote_combo=io.RemoteComboOptions("/voices", schema))
    with pytest.raises(TypeError, match="options"):
        io.Combo.Input("v")  # neither a list nor a remote source


async def test_a_multi_select_combo_checks_every_chosen_item(session):
    from comfy_api.latest import io
    from compat.v3.adapter import spec_from_v3

    class TagPicker(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="TestTagPicker", category="test", is_output_node=True,
                             inputs=[io.MultiCombo.Input("tags", options=["a", "b", "c"], default=["a"])],
                             outputs=[])

        @classmethod
        def execute(cls, tags):
            return io.NodeOutput(ui={"text": ["+".join(tags)]})

    registry = Registry()
    registry.add_spec(spec_from_v3(TagPicker))
    chosen = {"1": {"class_type": "TestTagPicker", "inputs": {"tags": {"__value__": ["a", "c"]}}}}
    checked = await validate_prompt(chosen, registry)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(
        chosen, str(uuid.uuid4()), outputs=["1"])
    assert outcome.ui_outputs["1"] == {"text": ["a+c"]}
    bad = await validate_prompt({"1": {"class_type": "TestTagPicker", "inputs": {"tags": {"__value__": ["a", "z"]}}}},
                                registry)
    (error,) = bad.node_errors["1"]["errors"]
    assert error["type"] == "value_not_in_list" and "['z']" in error["details"]
    assert error["extra_info"]["received_value"] == ["a", "z"]
