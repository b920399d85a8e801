"""Shape lookups by name during model detection."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from comfy_core.models.unet import UNetConfig, UNetConfigError
from comfy_core.models.vae import VAEConfig, VAEConfigError
from comfy_core.models.weight_shapes import shape_reader


class _DetectError(ValueError):
    pass


def test_shape_reader_reads_prefixed_shapes_as_tuples() -> None:
    shape = shape_reader({"m.a.weight": SimpleNamespace(shape=[4, 3, 1, 1])}, "m.", _DetectError, "Thing")
    assert shape("a.weight") == (4, 3, 1, 1)


def test_shape_reader_raises_the_models_error_naming_the_full_key() -> None:
    shape = shape_reader({}, "m.", _DetectError, "Thing")
    with pytest.raises(_DetectError, match=r"Thing key 'm\.b\.weight' is missing"):
        shape("b.weight")


def test_unet_and_vae_detection_name_their_missing_key() -> None:
    with pytest.raises(UNetConfigError, match=r"UNet key 'model\.diffusion_model\.input_blocks\.0\.0\.weight'"):
        UNetConfig.detect_from_weights({})
    with pytest.raises(VAEConfigError, match=r"VAE key 'first_stage_model\.encoder\.conv_in\.weight'"):
        VAEConfig.detect_from_weights({})
