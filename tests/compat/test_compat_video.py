"""ComfyUI's video API as packs use it (fixture pack tests/compat/api_packs/video_pack), on the
engine's own PyAV-backed values: `comfy_api.input_impl.VideoFromFile(path).get_components()`,
`VideoFromComponents(...).save_to(BytesIO)`, the V3 namespaces, a V3 node taking and giving VIDEO,
and the same objects flowing between the built-in video nodes and a pack's."""
from __future__ import annotations

import io
from fractions import Fraction

import av
import pytest
import torch

from tests.compat.api_pack_support import import_api_pack


@pytest.fixture
def video_pack(session):  # noqa: ANN001, ANN201
    yield from import_api_pack("video_pack")


def ramp(count: int = 6) -> torch.Tensor:
    return (torch.linspace(0.1, 0.9, 16)[None, None, :, None] + torch.linspace(0, 0.1, count)[:, None, None, None]
            ).expand(count, 8, 16, 3).contiguous()


def test_a_pack_reads_a_file_through_the_old_import_paths(video_pack, tmp_path):
    from comfy_core.video import VideoFromComponents as Ours

    video_pack.make_video(ramp(), 6).save_to(str(tmp_path / "v.mp4"))
    images, audio, fps = video_pack.frames_of(str(tmp_path / "v.mp4"))
    assert images.shape == (6, 8, 16, 3) and audio is None and fps == 6.0
    assert (images - ramp()).abs().mean() < 0.02
    assert video_pack.VideoFromComponents is Ours  # the pack's classes are the engine's


def test_a_v3_node_takes_and_gives_video(video_pack, tmp_path):
    from compat.v3.adapter import spec_from_v3

    spec = spec_from_v3(video_pack.ReverseVideo)
    assert [o.type for o in spec.outputs] == ["VIDEO"] and spec.inputs[0].type == "VIDEO"
    out = spec.behaviour.call(None, video=video_pack.make_video(ramp(), 6))
    (video,) = out["result"]
    assert torch.equal(video.get_components().images, ramp().flip(0))


def test_a_v1_node_saves_a_video_to_memory(video_pack):
    node = video_pack.NODE_CLASS_MAPPINGS["VideoPackBytes"]()
    (size,) = node.run(video_pack.make_video(ramp(), 6))
    buffer = io.BytesIO()
    video_pack.make_video(ramp(), 6).save_to(buffer)
    with av.open(io.BytesIO(buffer.getvalue())) as container:
        assert sum(1 for _ in container.decode(video=0)) == 6
    assert size == len(buffer.getvalue())


def test_latest_and_pinned_namespaces_name_the_same_classes(session):
    import comfy_api.latest as latest
    import comfy_api.v0_0_2 as pinned
    from comfy_api.latest._input_impl.video_types import VideoFromFile
    from comfy_api.latest._util import VideoComponents

    from comfy_core.video import VideoInput

    assert latest.InputImpl.VideoFromFile is VideoFromFile is pinned.InputImpl.VideoFromFile
    assert latest.Types.VideoComponents is VideoComponents and latest.Input.Video is VideoInput
    from comfy_api.input import ImageInput, MaskInput

    assert latest.Input.Image is torch.Tensor is ImageInput is MaskInput is latest.Input.Mask  # looked up lazily
    video = latest.InputImpl.VideoFromComponents(latest.Types.VideoComponents(images=ramp(3), frame_rate=Fraction(3)))
    assert video.get_dimensions() == (16, 8) and video.get_duration() == 1.0
    assert "mp4" in video.get_container_format().split(",")  # written to memory, then probed


def test_a_pack_video_flows_into_the_built_in_save_video(video_pack, session):
    from nodes.video_io import get_video_components, save_video

    with session.activate():
        from graph.context import NodeContext, reset_current, set_current

        token = set_current(NodeContext("p", "1", "1", None, session.env, class_type="SaveVideo"))
        try:
            ui = save_video(video_pack.make_video(ramp(), 6), "pack", "auto", "auto")
        finally:
            reset_current(token)
    (record,) = ui["ui"]["images"]
    images, _, fps, _, _ = get_video_components(video_pack.VideoFromFile(str(session.env.output_dir / record["filename"])))
    assert images.shape[0] == 6 and fps == 6.0
