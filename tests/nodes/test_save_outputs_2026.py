"""Today's ComfyUI's save / preview nodes pass their input on as an output (comfy_extras/nodes_audio.py,
nodes_images.py, nodes_video.py of the 2026 commits named in tests/data/object_info_2026 and
tests/nodes/test_object_info_parity.py): SaveAudio / SaveAudioMP3 / SaveAudioOpus / PreviewAudio an
AUDIO `audio`, SaveAnimatedWEBP / SaveAnimatedPNG / SaveWEBM an IMAGE `images`, SaveSVGNode an SVG
`svg`, SaveVideo a VIDEO `video`. A graph goes on from them: validated and run through the executor, each downstream node
receives the very value the save node was given, and the files are still written."""
from __future__ import annotations

import math
from io import BytesIO

import torch

from graph.executor import Executor
from graph.native import Input, Output, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment

CAPTURED: dict = {}


@node("TestToneSource", outputs=[Output("AUDIO")])
def tone_source():
    t = torch.arange(800, dtype=torch.float32) / 8000
    return ({"waveform": torch.sin(2 * math.pi * 440 * t).reshape(1, 1, -1).repeat(1, 2, 1), "sample_rate": 8000},)


@node("TestFramesSource", outputs=[Output("IMAGE")])
def frames_source():
    return (torch.rand(2, 16, 16, 3, generator=torch.Generator().manual_seed(0)),)


@node("TestSvgSource", outputs=[Output("SVG")])
def svg_source():
    from nodes.save_formats import SVG

    return (SVG([BytesIO(b'<svg width="1"><rect/></svg>')]),)


@node("TestCaptureSaved", output_node=True,
      inputs=[Input("audio", "AUDIO"), Input("images", "IMAGE"), Input("video", "VIDEO"), Input("webm", "IMAGE"),
              Input("svg", "SVG")])
def capture_saved(audio, images, video, webm, svg):
    CAPTURED.update(audio=audio, images=images, video=video, webm=webm, svg=svg)
    return {}


async def test_save_and_preview_nodes_pass_their_input_on_through_the_executor(tmp_path):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    registry = Registry()
    register_builtin_nodes(registry)
    for fn in (tone_source, frames_source, svg_source, capture_saved):
        registry.add_native(fn)
    prompt = {
        "1": {"class_type": "TestToneSource", "inputs": {}},
        "2": {"class_type": "SaveAudio", "inputs": {"audio": ["1", 0], "filename_prefix": "a/flac"}},
        "3": {"class_type": "SaveAudioMP3", "inputs": {"audio": ["2", 0], "filename_prefix": "a/mp3", "quality": "V0"}},
        "4": {"class_type": "SaveAudioOpus", "inputs": {"audio": ["3", 0], "filename_prefix": "a/opus",
                                                        "quality": "64k"}},
        "5": {"class_type": "PreviewAudio", "inputs": {"audio": ["4", 0]}},
        "10": {"class_type": "TestFramesSource", "inputs": {}},
        "11": {"class_type": "SaveAnimatedWEBP", "inputs": {"images": ["10", 0], "filename_prefix": "i/webp",
                                                            "fps": 6.0, "lossless": True, "quality": 80,
                                                            "method": "fastest"}},
        "12": {"class_type": "SaveAnimatedPNG", "inputs": {"images": ["11", 0], "filename_prefix": "i/apng",
                                                           "fps": 6.0, "compress_level": 1}},
        "13": {"class_type": "SaveWEBM", "inputs": {"images": ["10", 0], "filename_prefix": "v/webm", "codec": "vp9",
                                                    "fps": 6.0, "crf": 40.0}},
        "20": {"class_type": "CreateVideo", "inputs": {"images": ["10", 0], "fps": 6.0}},
        "21": {"class_type": "SaveVideo", "inputs": {"video": ["20", 0], "filename_prefix": "v/mp4",
                                                     "format": "auto", "codec": "auto"}},
        "22": {"class_type": "TestSvgSource", "inputs": {}},
        "23": {"class_type": "SaveSVGNode", "inputs": {"svg": ["22", 0], "filename_prefix": "s/svg"}},
        "30": {"class_type": "TestCaptureSaved", "inputs": {"audio": ["5", 0], "images": ["12", 0],
                                                            "video": ["21", 0], "webm": ["13", 0], "svg": ["23", 0]}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    CAPTURED.clear()
    outcome = await Executor(registry, env=env).execute(prompt, "saved", outputs=checked.outputs)
    assert outcome.status == "success", outcome.error

    source_audio, source_frames = tone_source()[0], frames_source()[0]
    assert torch.equal(CAPTURED["audio"]["waveform"], source_audio["waveform"])
    assert CAPTURED["audio"]["sample_rate"] == 8000
    assert torch.equal(CAPTURED["images"], source_frames) and torch.equal(CAPTURED["webm"], source_frames)
    assert torch.equal(CAPTURED["video"].get_components().images, source_frames)  # the VIDEO itself, not the file
    assert [d.getvalue() for d in CAPTURED["svg"].data] == [b'<svg width="1"><rect/></svg>']
    written = sorted(p.relative_to(env.output_dir).as_posix() for p in env.output_dir.rglob("*.*"))
    assert written == ["a/flac_00001_.flac", "a/mp3_00001_.mp3", "a/opus_00001_.opus", "i/apng_00001_.png",
                       "i/webp_00001_.webp", "s/svg_00001_.svg", "v/mp4_00001_.mp4",
                       "v/webm_00001_.webm"]
    assert [p.suffix for p in env.temp_dir.rglob("*.flac")] == [".flac"]  # PreviewAudio still previews
