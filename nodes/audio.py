"""The audio nodes video needs, from ComfyUI's comfy_extras/nodes_audio.py (0.3.64): LoadAudio,
SaveAudio (FLAC), SaveAudioMP3, SaveAudioOpus, PreviewAudio. AUDIO is ComfyUI's dict
`{"waveform": [B, C, S] float, "sample_rate": int}`; the files are read and written with PyAV
(comfy_core.video.audio_files).

- LoadAudio lists the input folder's audio and video files (the track of a video loads too),
  with ComfyUI's `audio_upload` widget; change detection is the file's SHA-256, as ComfyUI.
- The save nodes write one file per batch item, `<prefix>_00001_.<ext>` (`%batch_num%` in the
  prefix becomes the item's index; the counter counts up), with the prompt and each
  `extra_pnginfo` key as JSON tags unless `--disable-metadata`, and return
  `{"ui": {"audio": [{filename, subfolder, type}]}}`, which the editor plays.
- PreviewAudio writes FLAC into the temp folder, `ComfyUI_temp_<5 random letters>`.
- Today's ComfyUI: SaveAudio / SaveAudioMP3 / SaveAudioOpus / PreviewAudio pass their AUDIO on as an
  output `audio` (V3 nodes; the three single-format ones deprecated, "(DEPRECATED)" in their names).
- SaveAudioAdvanced (today's ComfyUI, "Save Audio (Advanced)"): one node for the three formats, a
  `format` DynamicCombo (flac; mp3 with quality V0 / 128k / 320k; opus with quality 64k .. 320k),
  the files as the save nodes above, and the AUDIO passed on as its output.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from graph.native import Combo, Output, node
from graph import v3_schema as v3
from nodes._media_files import input_files_of, media_errors, validate_file
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors
from nodes.image import annotated_path, file_sha256

MODULE = "comfy_extras.nodes_audio"
MP3_QUALITIES = ["V0", "128k", "320k"]  # comfy_core.video.audio_files.MP3_QUALITIES
OPUS_QUALITIES = ["64k", "96k", "128k", "192k", "320k"]
list_input_audio = input_files_of(("audio", "video"))


def audio_exists(audio: str) -> bool | str:
    return validate_file(audio, "audio", "audio")


def audio_hash(audio: str, **_: Any) -> str | float:
    from nodes._media_files import context_env

    env = context_env()
    if env is None:
        return float("nan")
    return file_sha256(annotated_path(env, audio, input_name="audio"))


def _tags(prompt: Any, extra_pnginfo: Any) -> dict[str, str]:
    if current_env().disable_metadata:
        return {}
    tags = {} if prompt is None else {"prompt": json.dumps(prompt)}
    if isinstance(extra_pnginfo, dict):
        tags.update({key: json.dumps(value) for key, value in extra_pnginfo.items()})
    return tags


def write_audio_files(audio: Any, filename_prefix: Any, folder_type: str, format: str,  # noqa: A002
                      quality: str | None, prompt: Any, extra_pnginfo: Any) -> dict:
    """Each batch item of `audio` as a `format` file in the output or temp folder; the UI record."""
    from comfy_core.image.file_names import save_location
    from comfy_core.video.audio_files import encode_audio
    from comfy_core.video.audio_frames import check_audio

    with media_errors("audio"):
        waveform, sample_rate = check_audio(audio)
    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    env = current_env()
    root = Path(env.output_dir if folder_type == "output" else env.temp_dir)
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(root, filename_prefix, 0, 0)
    tags = _tags(prompt, extra_pnginfo)
    results = []
    for batch_number, clip in enumerate(waveform.detach().cpu()):
        name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}_.{format}"
        with media_errors("audio"):
            data = encode_audio(clip, sample_rate, format, quality, tags)
        (folder / name).write_bytes(data)
        results.append({"filename": name, "subfolder": subfolder, "type": folder_type})
        counter += 1
    return {"ui": {"audio": results}}


@node("LoadAudio", category="audio", display_name="Load Audio", python_module=MODULE,
      inputs=[Combo("audio", list_input_audio, audio_upload=True)],
      outputs=[Output("AUDIO")], is_changed=audio_hash, validate_inputs=audio_exists)
def load_audio(audio: str) -> tuple[dict]:
    """The first audio stream of the file, `[1, C, S]` float32 at its sample rate."""
    from comfy_core.video.audio_files import read_audio

    path = annotated_path(current_env(), audio, input_name="audio")
    with media_errors("audio"):
        waveform, sample_rate = read_audio(path)
    return ({"waveform": waveform.unsqueeze(0), "sample_rate": sample_rate},)


# Today's ComfyUI (comfy_extras/nodes_audio.py, V3): the four save / preview nodes pass their AUDIO
# on as an output "audio" (a graph may go on from saved audio); the three single-format save nodes
# are deprecated in favour of SaveAudioAdvanced.
_PREFIX = v3.String("filename_prefix", default="audio/ComfyUI")
_AUDIO_OUT = [v3.Output("AUDIO", "audio")]


def _passed_on(audio: Any, saved: dict) -> dict:
    return {"ui": saved["ui"], "result": (audio,)}


# Today's execute methods also take a `format` (not a declared input; comfy_extras/nodes_audio.py@3fa38fd9;
# here after `quality`, so calls by this module's order keep working; packs' positional calls follow
# ComfyUI's order through the facade's recorded parameter names):
# `SaveAudio.execute(audio, filename_prefix="ComfyUI", format="flac")`, SaveAudioMP3's `format="mp3",
# quality="128k"`, SaveAudioOpus's `format="opus", quality="V3"`, handed to `AudioSaveHelper`, which opens
# the container of that name and picks its codec (flac, libmp3lame, libopus) and sets a bit rate only
# for a quality of that format (others keep the encoder's default).
SAVE_FORMATS_BY_NAME = {"flac": [], "mp3": MP3_QUALITIES, "opus": OPUS_QUALITIES}
# A quality of some format, or SaveAudioOpus.execute's own default "V3" (a quality of none): for another
# format it means the encoder's default. Any other value is refused, as before.
_FOREIGN_QUALITIES = frozenset(MP3_QUALITIES) | frozenset(OPUS_QUALITIES) | {"V3"}


def _save_as(audio: Any, filename_prefix: Any, format: Any, quality: Any, prompt: Any,  # noqa: A002
             extra_pnginfo: Any) -> dict:
    """The save nodes' body: `format` picks container and codec; a `quality` of another format (or
    "V3") is left to the encoder's default (ComfyUI's helper sets no bit rate then; here the
    format's own default quality, mp3 V0 / opus 128k, comfy_core.video.audio_files)."""
    if format not in SAVE_FORMATS_BY_NAME:
        raise NodeInputError("format", f"one of {list(SAVE_FORMATS_BY_NAME)}", repr(format))
    if format == "flac" or (quality not in SAVE_FORMATS_BY_NAME[format] and quality in _FOREIGN_QUALITIES):
        quality = None  # flac has none; another format's quality: the encoder's default
    return _passed_on(audio, write_audio_files(audio, filename_prefix, "output", format, quality, prompt,
                                               extra_pnginfo))


@v3.v3_node("SaveAudio", display_name="Save Audio (FLAC) (DEPRECATED)", category="audio", python_module=MODULE,
            search_aliases=["export flac"], essentials_category="Audio", deprecated=True, output_node=True,
            inputs=[v3.Socket("audio", "AUDIO"), _PREFIX], outputs=_AUDIO_OUT)
def save_audio(audio: dict, filename_prefix: str = "ComfyUI", format: str = "flac",  # noqa: A002
               prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """Each batch item as a FLAC file, or as `format` (mp3 at 128k, opus at 128k: the helper's
    default quality) where a caller passes one."""
    return _save_as(audio, filename_prefix, format, "128k", prompt, extra_pnginfo)


@v3.v3_node("SaveAudioMP3", display_name="Save Audio (MP3) (DEPRECATED)", category="audio", python_module=MODULE,
            search_aliases=["export mp3"], essentials_category="Audio", deprecated=True, output_node=True,
            inputs=[v3.Socket("audio", "AUDIO"), _PREFIX, v3.Combo("quality", MP3_QUALITIES, default="V0")],
            outputs=_AUDIO_OUT)
def save_audio_mp3(audio: dict, filename_prefix: str = "ComfyUI", quality: str = "128k",
                   format: str = "mp3", prompt: Any = None, extra_pnginfo: Any = None) -> dict:  # noqa: A002
    return _save_as(audio, filename_prefix, format, quality, prompt, extra_pnginfo)


@v3.v3_node("SaveAudioOpus", display_name="Save Audio (Opus) (DEPRECATED)", category="audio", python_module=MODULE,
            search_aliases=["export opus"], deprecated=True, output_node=True,
            inputs=[v3.Socket("audio", "AUDIO"), _PREFIX, v3.Combo("quality", OPUS_QUALITIES, default="128k")],
            outputs=_AUDIO_OUT)
def save_audio_opus(audio: dict, filename_prefix: str = "ComfyUI", quality: str = "V3",
                    format: str = "opus", prompt: Any = None, extra_pnginfo: Any = None) -> dict:  # noqa: A002
    return _save_as(audio, filename_prefix, format, quality, prompt, extra_pnginfo)


@v3.v3_node("PreviewAudio", display_name="Preview Audio", category="audio", python_module=MODULE,
            description="Preview the audio without saving it to the ComfyUI output directory.",
            search_aliases=["preview", "preview audio", "play audio"], output_node=True,
            inputs=[v3.Socket("audio", "AUDIO")], outputs=_AUDIO_OUT)
def preview_audio(audio: dict, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    suffix = "".join(random.choice("abcdefghijklmnopqrstupvxyz") for _ in range(5))
    return _passed_on(audio, write_audio_files(audio, f"ComfyUI_temp_{suffix}", "temp", "flac", None, prompt,
                                               extra_pnginfo))


SAVE_FORMATS = (v3.ComboOption("flac", ()),
                v3.ComboOption("mp3", (v3.Combo("quality", MP3_QUALITIES, default="V0"),)),
                v3.ComboOption("opus", (v3.Combo("quality", OPUS_QUALITIES, default="128k"),)))


@v3.v3_node("SaveAudioAdvanced", display_name="Save Audio (Advanced)", category="audio", python_module=MODULE,
            description="Saves the input audio to your ComfyUI output directory.", output_node=True,
            search_aliases=["save audio", "export audio", "output audio", "write audio", "flac", "mp3", "opus"],
            inputs=[v3.Socket("audio", "AUDIO", tooltip="The audio to save."),
                    v3.String("filename_prefix", default="audio/ComfyUI",
                              tooltip="The prefix for the file to save. May include formatting tokens such as "
                                      "%date:yyyy-MM-dd%."),
                    v3.DynamicCombo("format", SAVE_FORMATS, tooltip="The file format in which to save the audio.")],
            outputs=[v3.Output("AUDIO", "audio")])
def save_audio_advanced(audio: dict, filename_prefix: str, format: dict, prompt: Any = None,  # noqa: A002
                        extra_pnginfo: Any = None) -> dict:
    """Each batch item as a file of the chosen format (ComfyUI's `AudioSaveHelper`); the AUDIO out."""
    if not isinstance(format, dict) or format.get("format") not in ("flac", "mp3", "opus"):
        raise NodeInputError("format", "one of flac, mp3, opus", describe(format))
    file_format, quality = format["format"], format.get("quality")
    choices = {"mp3": MP3_QUALITIES, "opus": OPUS_QUALITIES}.get(file_format, [])
    if file_format != "flac" and quality not in choices:
        raise NodeInputError("format.quality", f"one of {choices}", repr(quality))
    saved = write_audio_files(audio, filename_prefix, "output", file_format, quality, prompt, extra_pnginfo)
    return {"ui": saved["ui"], "result": (audio,)}
