"""A fixture pack written the way video packs (VideoHelperSuite-style loaders, V3 video nodes)
use ComfyUI's video API: the old import paths (`comfy_api.input_impl`, `comfy_api.util`,
`comfy_api.input`), the V3 namespaces (`comfy_api.latest.InputImpl` / `Types` / `Input`), a V3
node taking and returning VIDEO, and a V1 node saving a VIDEO to a BytesIO."""
import io
from fractions import Fraction

from comfy_api.input import AudioInput, VideoInput
from comfy_api.input_impl import VideoFromComponents, VideoFromFile
from comfy_api.latest import ComfyExtension, Input, InputImpl, Types, io as comfy_io
from comfy_api.util import VideoCodec, VideoComponents, VideoContainer


def frames_of(path):
    """What a loader pack does with a path: its components through the old import path."""
    components = VideoFromFile(path).get_components()
    return components.images, components.audio, float(components.frame_rate)


def reversed_video(video: VideoInput) -> VideoInput:
    components = video.get_components()
    return InputImpl.VideoFromComponents(Types.VideoComponents(images=components.images.flip(0),
                                                               audio=components.audio,
                                                               frame_rate=components.frame_rate))


class ReverseVideo(comfy_io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return comfy_io.Schema(node_id="VideoPackReverse", category="video_pack",
                               inputs=[comfy_io.Video.Input("video")], outputs=[comfy_io.Video.Output()])

    @classmethod
    def execute(cls, video):
        return comfy_io.NodeOutput(reversed_video(video))


class VideoBytes:
    """A V1 node: the VIDEO as MP4 bytes (as packs that upload videos do)."""

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "video_pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"video": ("VIDEO",)}}

    def run(self, video):
        buffer = io.BytesIO()
        video.save_to(buffer, format=VideoContainer.MP4, codec=VideoCodec.H264)
        return (len(buffer.getvalue()),)


def make_video(images, fps, audio=None):
    return VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(fps), audio=audio))


NODE_CLASS_MAPPINGS = {"VideoPackBytes": VideoBytes}
NAMES = (AudioInput, Input, ComfyExtension)
