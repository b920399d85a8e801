"""SeedVR2's nodes (nodes/seedvr2_nodes.py): what each hands on, and a clip sampled in temporal chunks
through the executor (SeedVR2TemporalChunk's list output mapped over SeedVR2Conditioning and
KSampler, SeedVR2TemporalMerge's list input), on the tiny template files."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from nodes.errors import NodeInputError
from tests.fixtures.template_models_seedvr2 import WRITERS_SEEDVR2


def test_preprocess_gives_one_videos_frames_padded():
    from nodes.seedvr2_nodes import seedvr2_preprocess

    (out,) = seedvr2_preprocess(torch.rand(3, 20, 18, 4))
    assert out.shape == (5, 32, 32, 3)
    (videos,) = seedvr2_preprocess(torch.rand(2, 2, 16, 16, 3))
    assert videos.shape == (2, 5, 16, 16, 3)
    with pytest.raises(NodeInputError, match="resized_images"):
        seedvr2_preprocess("not an image")


def test_postprocessing_refuses_an_unknown_method():
    from nodes.seedvr2_nodes import seedvr2_post_processing

    with pytest.raises(NodeInputError, match="color_correction_method"):
        seedvr2_post_processing(torch.rand(1, 8, 8, 3), torch.rand(1, 8, 8, 3), "sepia")
    (out,) = seedvr2_post_processing(torch.rand(1, 9, 9, 3), torch.rand(1, 9, 9, 3), "none")
    assert out.shape == (1, 8, 8, 3)


@pytest.fixture(scope="module")
def dit_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("seedvr2") / "seedvr2_3b_int8_convrot.safetensors"
    WRITERS_SEEDVR2["unet_seedvr2_3b"](path)
    return path


def test_conditioning_carries_the_files_texts_and_the_latent_with_a_ones_mask(dit_file):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.seedvr2_nodes import seedvr2_conditioning

    model = load_diffusion_model(dit_file)
    latent = torch.randn(1, 16, 2, 4, 6)
    positive, negative = seedvr2_conditioning(model, {"samples": latent})
    network = model.model.diffusion_model
    torch.testing.assert_close(positive[0][0], network.positive_conditioning.float()[None].to(positive[0][0].dtype))
    torch.testing.assert_close(negative[0][0], network.negative_conditioning.float()[None].to(negative[0][0].dtype))
    assert positive[0][0].shape == (1, 58, 32) and negative[0][0].shape == (1, 64, 32)
    condition = positive[0][1]["condition"]
    assert condition is negative[0][1]["condition"] and condition.shape == (1, 17, 2, 4, 6)
    torch.testing.assert_close(condition[:, :16], latent)
    assert bool((condition[:, 16] == 1).all())
    with pytest.raises(NodeInputError, match="vae_conditioning"):
        seedvr2_conditioning(model, {"samples": torch.randn(1, 4, 8, 8)})
    with pytest.raises(NodeInputError, match="model"):
        seedvr2_conditioning(object(), {"samples": latent})


def test_the_chunk_node_splits_by_hand_or_keeps_one_chunk_automatically():
    from nodes.seedvr2_nodes import seedvr2_temporal_chunk, seedvr2_temporal_merge

    latent = {"samples": torch.randn(1, 16, 5, 2, 2)}
    chunks, overlap = seedvr2_temporal_chunk(latent, 1, {"chunking_mode": "manual", "frames_per_chunk": 9})
    assert [c["samples"].shape[2] for c in chunks] == [3, 3] and overlap == 1
    (merged,) = seedvr2_temporal_merge(chunks, [overlap])
    torch.testing.assert_close(merged["samples"], latent["samples"])
    chunks, overlap = seedvr2_temporal_chunk(latent, 1, {"chunking_mode": "auto"})
    assert len(chunks) == 1 and overlap == 0  # the CPU's free memory holds a 17-frame clip of 16 x 16 pixels
    with pytest.raises(NodeInputError, match="latent"):
        seedvr2_temporal_chunk(latent, 0, {"chunking_mode": "manual", "frames_per_chunk": 8})


async def test_a_clip_sampled_in_temporal_chunks_through_the_executor(tmp_path: Path, dit_file: Path):
    from web.config import ServerConfig
    from web.headless import run_workflow

    (tmp_path / "models" / "diffusion_models").mkdir(parents=True)
    (tmp_path / "models" / "vae").mkdir(parents=True)
    (tmp_path / "models" / "diffusion_models" / dit_file.name).write_bytes(dit_file.read_bytes())
    WRITERS_SEEDVR2["vae_seedvr2"](tmp_path / "models" / "vae" / "seedvr2_ema_vae_fp16.safetensors")
    prompt = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 40, "height": 24, "batch_size": 9, "color": 0x336699}},
        "2": {"class_type": "SeedVR2Preprocess", "inputs": {"resized_images": ["1", 0]}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "seedvr2_ema_vae_fp16.safetensors"}},
        "4": {"class_type": "UNETLoader", "inputs": {"unet_name": dit_file.name, "weight_dtype": "default"}},
        "5": {"class_type": "VAEEncodeTiled", "inputs": {"pixels": ["2", 0], "vae": ["3", 0], "tile_size": 512,
                                                         "overlap": 64, "temporal_size": 4096, "temporal_overlap": 8}},
        "6": {"class_type": "SeedVR2TemporalChunk", "inputs": {"latent": ["5", 0], "temporal_overlap": 1,
                                                               "chunking_mode": "manual",
                                                               "chunking_mode.frames_per_chunk": 5}},
        "7": {"class_type": "SeedVR2Conditioning", "inputs": {"model": ["4", 0], "vae_conditioning": ["6", 0]}},
        "8": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": 7, "steps": 1, "cfg": 1.0,
                                                   "sampler_name": "euler", "scheduler": "simple",
                                                   "positive": ["7", 0], "negative": ["7", 1],
                                                   "latent_image": ["6", 0], "denoise": 1.0}},
        "9": {"class_type": "SeedVR2TemporalMerge", "inputs": {"latents": ["8", 0], "temporal_overlap": ["6", 1]}},
        "10": {"class_type": "VAEDecodeTiled", "inputs": {"samples": ["9", 0], "vae": ["3", 0], "tile_size": 512,
                                                          "overlap": 128, "temporal_size": 4096, "temporal_overlap": 8}},
        "11": {"class_type": "SeedVR2PostProcessing", "inputs": {"images": ["10", 0], "original_resized_images": ["1", 0],
                                                                 "color_correction_method": "wavelet"}},
        "12": {"class_type": "SaveImage", "inputs": {"images": ["11", 0], "filename_prefix": "sv2"}},
    }
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(prompt))
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=tmp_path, output_dir=tmp_path / "out"), path, out=out, err=err)
    assert code == 0, err.getvalue()[-3000:]
    saved = sorted((tmp_path / "out").glob("sv2_*.png"))
    assert len(saved) == 9  # 9 frames -> 3 latent frames in 2 chunks of 2 overlapping by 1 -> 3 -> 9 frames
    from PIL import Image

    assert Image.open(saved[0]).size == (40, 24)
