"""SaveVideo's 2026 inputs (Comfy-Org/ComfyUI comfy_extras/nodes_video.py, the commits named in
tests/data/object_info_2026/SaveVideo.json): a `format` dynamic combo (auto / mp4 / mkv / webm),
each option's `codec` dynamic combo (auto / h264 / av1; WebM auto / av1) and each codec's
`encoding` mode (auto, or re-encode at a `crf`). Prompts in today's nested shape and in 0.3.64's
flat one are validated and run through the executor; the files are read back with PyAV (container,
codec, frame count, the crf the encoder got); bad values are refused with the input named."""
from __future__ import annotations

import json
import math
import os
import uuid
from pathlib import Path

import av
import pytest
import torch

from graph.executor import Executor
from graph.native import Output, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.video_io import create_video, load_video, save_options, save_video
from tests.nodes.node_context import folders_env, running_node

FRAMES = 7


@node("TestSaveVideoFrames", outputs=[Output("IMAGE")])
def video_frames():
    """Seeded noise over a ramp: a lossy encoder's size follows its crf."""
    ramp = torch.linspace(0.1, 0.9, 48)[None, None, :, None].expand(FRAMES, 32, 48, 3)
    noise = torch.rand(FRAMES, 32, 48, 3, generator=torch.Generator().manual_seed(3))
    return ((0.7 * ramp + 0.3 * noise).contiguous(),)


@node("TestSaveVideoTone", outputs=[Output("AUDIO")])
def video_tone():
    t = torch.arange(16000, dtype=torch.float32) / 16000
    return ({"waveform": (0.3 * torch.sin(2 * math.pi * 330 * t)).expand(1, 2, -1).contiguous(), "sample_rate": 16000},)


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    return environment


@pytest.fixture(scope="module")
def registry() -> Registry:
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(video_frames)
    registry.add_native(video_tone)
    return registry


def source_nodes() -> dict:
    return {"1": {"class_type": "TestSaveVideoFrames", "inputs": {}},
            "2": {"class_type": "TestSaveVideoTone", "inputs": {}},
            "3": {"class_type": "CreateVideo", "inputs": {"images": ["1", 0], "fps": 8.0, "audio": ["2", 0]}}}


def save_node(prefix: str, **inputs) -> dict:
    return {"class_type": "SaveVideo", "inputs": {"video": ["3", 0], "filename_prefix": prefix, **inputs}}


async def run(registry: Registry, env: Environment, prompt: dict):
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    return await Executor(registry, env=env).execute(prompt, str(uuid.uuid4()), outputs=checked.outputs)


def saved_file(env: Environment, outcome, node_id: str) -> Path:
    (record,) = outcome.ui_outputs[node_id]["images"]
    return env.output_dir / record["subfolder"] / record["filename"]


def read_back(path: Path) -> tuple[str, str, int, list[str], dict]:
    """(container format, video codec, decoded frame count, audio codecs, tags lower-cased)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        count = sum(1 for _ in container.decode(stream))
        audio = [a.codec_context.codec.canonical_name for a in container.streams.audio]
        tags = {k.lower(): v for k, v in container.metadata.items()}
        return container.format.name, stream.codec_context.codec.canonical_name, count, audio, tags


# (format, codec) -> (extension, FFmpeg's demuxer name listing it, video codec, audio codec)
CHOICES = {
    ("auto", "auto"): ("mp4", "mp4", "h264", "aac"),
    ("auto", "h264"): ("mp4", "mp4", "h264", "aac"),
    ("auto", "av1"): ("webm", "webm", "av1", "opus"),
    ("mp4", "auto"): ("mp4", "mp4", "h264", "aac"),
    ("mp4", "h264"): ("mp4", "mp4", "h264", "aac"),
    ("mp4", "av1"): ("mp4", "mp4", "av1", "aac"),
    ("mkv", "auto"): ("mkv", "matroska", "h264", "aac"),
    ("mkv", "h264"): ("mkv", "matroska", "h264", "aac"),
    ("mkv", "av1"): ("mkv", "matroska", "av1", "aac"),
    ("webm", "auto"): ("webm", "webm", "av1", "opus"),
    ("webm", "av1"): ("webm", "webm", "av1", "opus"),
}


async def test_each_container_and_codec_writes_a_file_pyav_reads_back(registry, env):
    prompt = source_nodes()
    ids = {}
    for n, (fmt, codec) in enumerate(CHOICES):
        ids[fmt, codec] = node_id = str(10 + n)
        prompt[node_id] = save_node(f"v/{fmt}_{codec}", **{"format": fmt, "format.codec": codec})
    extra = {"workflow": {"nodes": [{"id": 3}]}}
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, str(uuid.uuid4()), outputs=checked.outputs,
                                                        extra_data={"extra_pnginfo": extra})
    assert outcome.status == "success", outcome.error
    for (fmt, codec), (extension, demuxer, video_codec, audio_codec) in CHOICES.items():
        path = saved_file(env, outcome, ids[fmt, codec])
        assert path.name == f"{fmt}_{codec}_00001_.{extension}"
        found = read_back(path)
        assert demuxer in found[0].split(",") and found[1:4] == (video_codec, FRAMES, [audio_codec]), (fmt, codec)
        assert json.loads(found[4]["prompt"])["3"]["class_type"] == "CreateVideo"
        assert json.loads(found[4]["workflow"]) == extra["workflow"]


def test_the_2026_auto_container_follows_the_codec():
    assert save_options({"format": "auto", "codec": {"codec": "av1"}}, None) == ("webm", "av1", None)
    assert save_options({"format": "auto", "codec": {"codec": "h264"}}, None) == ("mp4", "h264", None)
    assert save_options({"format": "auto", "codec": {"codec": "auto"}}, None) == ("mp4", "auto", None)
    assert save_options({"format": "mkv"}, None) == ("mkv", "auto", None)  # no codec at all: auto
    re_encode = {"codec": "av1", "encoding": {"encoding": "re-encode", "crf": 40.0}}
    assert save_options({"format": "mkv", "codec": re_encode}, None) == ("mkv", "av1", 40.0)
    assert save_options({"format": "mp4", "codec": {"codec": "h264", "encoding": {"encoding": "auto"}}},
                        None) == ("mp4", "h264", None)


def x264_crf(path: Path) -> str:
    """The crf libx264 wrote into its settings (the SEI text every x264 stream carries)."""
    data = path.read_bytes()
    start = data.index(b" crf=") + 5
    return data[start:data.index(b" ", start)].decode()


def video_bytes(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(p.size for p in container.demux(video=0))


async def test_re_encode_gives_the_encoder_its_crf_and_changes_the_output(registry, env):
    def codec(name: str, crf: float | None) -> dict:
        if crf is None:
            return {"format": "mkv", "format.codec": name}
        return {"format": "mkv", "format.codec": name, "format.codec.encoding": "re-encode",
                "format.codec.encoding.crf": crf}

    prompt = {**source_nodes(),
              "10": save_node("h264_default", **codec("h264", None)),
              "11": save_node("h264_low", **codec("h264", 4.0)),
              "12": save_node("h264_high", **codec("h264", 45.0)),
              "13": save_node("av1_low", **codec("av1", 8.0)),
              "14": save_node("av1_high", **codec("av1", 60.0)),  # past H.264's 51: AV1's own range
              "15": save_node("auto_mode", **{**codec("h264", None), "format.codec.encoding": "auto"})}
    outcome = await run(registry, env, prompt)
    assert outcome.status == "success", outcome.error
    path = {node_id: saved_file(env, outcome, node_id) for node_id in ("10", "11", "12", "13", "14", "15")}
    assert x264_crf(path["10"]) == x264_crf(path["15"]) == "23.0"  # libx264's default when none is asked
    assert x264_crf(path["11"]) == "4.0" and x264_crf(path["12"]) == "45.0"
    assert video_bytes(path["11"]) > video_bytes(path["10"]) > video_bytes(path["12"])
    assert video_bytes(path["13"]) > video_bytes(path["14"])
    for node_id in path:
        assert read_back(path[node_id])[2] == FRAMES


def test_a_loaded_file_is_copied_unless_re_encoding_or_another_container_is_asked(tmp_path):
    env = folders_env(tmp_path)
    with running_node("SaveVideo", "7", env):
        (made,) = create_video(video_frames()[0], 8.0, video_tone()[0])
        first = save_video(made, "src", {"format": "mp4", "codec": {"codec": "h264"}})
        os.replace(env.output_dir / first["ui"]["images"][0]["filename"], env.input_dir / "clip.mp4")
        (video,) = load_video("clip.mp4")["result"]
        choices = (
            ("copy", {"format": "auto", "codec": {"codec": "auto"}}),
            ("same", {"format": "mp4", "codec": {"codec": "h264", "encoding": {"encoding": "auto"}}}),
            ("crf", {"format": "mp4", "codec": {"codec": "h264", "encoding": {"encoding": "re-encode", "crf": 40.0}}}),
            ("mkv", {"format": "mkv", "codec": {"codec": "auto"}}),
            ("webm", {"format": "webm", "codec": {"codec": "auto"}}))
        outputs = {name: env.output_dir / save_video(video, name, value)["ui"]["images"][0]["filename"]
                   for name, value in choices}

    def packets(path: Path) -> list[bytes]:
        with av.open(str(path)) as container:
            return [bytes(p) for p in container.demux(video=0) if p.size]

    source = packets(env.input_dir / "clip.mp4")
    assert packets(outputs["copy"]) == source and packets(outputs["same"]) == source
    assert packets(outputs["crf"]) != source and x264_crf(outputs["crf"]) == "40.0"
    assert [read_back(outputs[name])[1:4] for name in ("crf", "mkv", "webm")] == [
        ("h264", FRAMES, ["aac"]), ("h264", FRAMES, ["aac"]), ("av1", FRAMES, ["opus"])]
    assert outputs["mkv"].suffix == ".mkv" and outputs["webm"].suffix == ".webm"


async def test_0_3_64_prompts_still_validate_and_run(registry, env):
    prompt = {**source_nodes(),
              "10": save_node("old_auto", format="auto", codec="auto"),
              "11": save_node("old_h264", format="mp4", codec="h264"),
              # today's prompt with the hidden top-level codec also sent: the codec inside `format` wins
              "12": save_node("both", **{"format": "mkv", "format.codec": "av1", "codec": "h264"})}
    outcome = await run(registry, env, prompt)
    assert outcome.status == "success", outcome.error
    assert [(p.name, read_back(p)[1:3]) for p in (saved_file(env, outcome, i) for i in ("10", "11", "12"))] == [
        ("old_auto_00001_.mp4", ("h264", FRAMES)), ("old_h264_00001_.mp4", ("h264", FRAMES)),
        ("both_00001_.mkv", ("av1", FRAMES))]
    with running_node("SaveVideo", "7", env):  # a pack calling the node with 0.3.64's strings
        (video,) = create_video(video_frames()[0], 8.0)
        ui = save_video(video, "direct", "mp4", "h264")
    assert ui["ui"]["images"][0]["filename"] == "direct_00001_.mp4"


async def test_bad_values_are_clear_errors_and_write_nothing(registry, env):
    checked = await validate_prompt({**source_nodes(), "10": save_node("x", format="avi", codec="auto")},
                                    registry, env=env)
    assert not checked.ok and "format" in json.dumps(checked.node_errors)
    cases = {
        # WebM takes AV1 only: the webm option's codec choices
        "20": ({"format": "webm", "format.codec": "h264"}, "'h264' is not one of ['auto', 'av1']"),
        # 60 is in AV1's range (so the prompt validates) but past H.264's 51
        "21": ({"format": "mp4", "format.codec": "h264", "format.codec.encoding": "re-encode",
                "format.codec.encoding.crf": 60.0}, "'format.codec.encoding.crf' expected a FLOAT in 0..51 for h264"),
        "22": ({"format": "mp4", "format.codec": "av1", "format.codec.encoding": "re-encode"}, "encoding.crf"),
    }
    for node_id, (inputs, message) in cases.items():
        outcome = await run(registry, env, {**source_nodes(), node_id: save_node("bad", **inputs)})
        assert outcome.status == "error" and outcome.error["node_id"] == node_id
        assert message in outcome.error["exception_message"], outcome.error["exception_message"]
    assert not [p for p in env.output_dir.rglob("*") if p.is_file()]


def test_bad_direct_values_name_the_input(tmp_path):
    env = folders_env(tmp_path)
    with running_node("SaveVideo", "7", env):
        (video,) = create_video(video_frames()[0], 8.0)
        for value, codec, message in (
                ({"format": "avi"}, None,
                 "input 'format' expected one of ['auto', 'mp4', 'mkv', 'webm'], received 'avi'"),
                ("mp4", "vp8", "input 'codec' expected one of ['auto', 'h264', 'av1'] when format is 'mp4'"),
                ({"format": "webm", "codec": {"codec": "h264"}}, None, "input 'format.codec' expected one of "
                                                                       "['auto', 'av1'] when format is 'webm'"),
                ({"format": "mp4", "codec": {"codec": "h264", "encoding": {"encoding": "re-encode", "crf": "high"}}},
                 None, "'format.codec.encoding.crf' expected a FLOAT in 0..51 for h264, received 'high'"),
                ({"format": "mp4", "codec": {"codec": "av1", "encoding": {"encoding": "twice"}}}, None,
                 "'format.codec.encoding' expected one of ['auto', 're-encode']"),
                (7, None, "input 'format' expected a format choice")):
            with pytest.raises(NodeInputError, match="SaveVideo \\(node 7\\)") as info:
                save_video(video, "x", value, codec)
            assert message in str(info.value)
    assert not [p for p in env.output_dir.rglob("*") if p.is_file()]


def test_the_schema_nests_codec_and_encoding_and_hides_the_old_codec(registry, env):
    info = registry.object_info(env)["SaveVideo"]
    fmt = info["input"]["required"]["format"][1]
    codecs = {o["key"]: [c["key"] for c in o["inputs"]["required"]["codec"][1]["options"]] for o in fmt["options"]}
    assert codecs == {"auto": ["auto", "h264", "av1"], "mp4": ["auto", "h264", "av1"], "mkv": ["auto", "h264", "av1"],
                      "webm": ["auto", "av1"]}
    hidden = info["input"]["optional"]["codec"]
    assert hidden[0] == "COMFY_DYNAMICCOMBO_V3" and hidden[1]["hidden"] is True
