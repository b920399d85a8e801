"""Today's ComfyUI declares most core comfy_extras nodes with the V3 schema and keeps their V1
method name as an alias of `execute` (comfy_extras/nodes_custom_sampler.py: `get_sigmas = execute`,
`sample = execute`, ...; nodes_images.py: `stitch = execute`, `resize_and_pad = execute`). Packs
call `execute` on the class (Primere's samplers: `SamplerCustom.execute(model, False, seed, cfg, ...)[0]`,
`BasicScheduler.execute(model, scheduler, steps, denoise=...)[0]`, `ImageStitch.execute(...)[0]`).
The facades (compat/node_facades.py) take that shape from compat/comfy_node_functions_2026.json."""
from __future__ import annotations

import inspect

import pytest
import torch


@pytest.fixture
def sd1(session, tiny_sd1_ckpt):
    """MODEL, positive, negative of a tiny random SD1 checkpoint (conditioning through the facade)."""
    import nodes
    from comfy_core.loading import load_checkpoint

    model, clip, _vae = load_checkpoint(tiny_sd1_ckpt)
    positive = nodes.CLIPTextEncode().encode(clip, "a cat")[0]
    negative = nodes.CLIPTextEncode().encode(clip, "blurry")[0]
    return model, positive, negative


def _latent() -> dict:
    return {"samples": torch.zeros(1, 4, 8, 8)}


def test_recorded_v3_nodes_have_execute_and_their_aliases_as_today(session):
    from compat.node_facades import (V3_FUNCTION, _builtin_function, _make_facade, _positional_names, class_for,
                                     comfy_function_names, comfy_nodes_today)
    from nodes import builtin_node_functions

    specs = {fn.__node_spec__.node_id: fn.__node_spec__ for fn in builtin_node_functions()}
    today = comfy_nodes_today()
    checked = 0
    for node_id, record in today.items():
        if node_id not in specs:
            continue
        cls = class_for(specs[node_id])
        if record["schema"] == "V1":  # still V1 today (ModelSamplingDiscrete ...): 0.3.64's method
            assert cls.FUNCTION == comfy_function_names()[node_id] and "execute" not in cls.__dict__, node_id
            continue
        assert cls.FUNCTION == V3_FUNCTION, node_id
        assert isinstance(cls.__dict__["execute"], classmethod), node_id
        assert callable(cls.EXECUTE_NORMALIZED) and callable(cls.define_schema), node_id
        assert cls.define_schema().node_id == node_id
        for alias in record["aliases"]:  # `get_sigmas = execute`: the very same classmethod
            assert cls.__dict__[alias] is cls.__dict__["execute"], (node_id, alias)
        # a positional call names each argument by today's execute order (a recording stand-in
        # for the node's function, so no model is needed); an `execute(images, **kwargs)` takes
        # its widgets by name, so a positional call of it alone cannot name them all
        fn = _builtin_function(node_id)
        order = _positional_names(record["execute"])
        if order and "**" not in record["execute"] and all(name in inspect.signature(fn).parameters for name in order):
            seen: dict = {}

            def recording(*args, _fn=fn, _seen=seen, **kwargs):
                _seen.update(inspect.signature(_fn).bind(*args, **kwargs).arguments)
                return ("out",)

            recording.__signature__ = inspect.signature(fn)
            sentinels = [object() for _ in order]
            assert _make_facade(specs[node_id], recording).execute(*sentinels)[0] == "out"
            assert seen == dict(zip(order, sentinels)), node_id
        checked += 1
    assert checked >= 90
    for node_id in ("BasicScheduler", "SamplerCustom", "SamplerCustomAdvanced", "CFGGuider", "ImageStitch",
                    "ResizeAndPadImage", "GrowMask", "LoadAudio", "VAEDecodeAudio"):
        assert today[node_id]["schema"] == "V3", node_id


def test_primere_scheduler_calls_on_the_class(sd1):
    import comfy.samplers
    from comfy_extras import nodes_custom_sampler

    model, _pos, _neg = sd1
    model_sampling = model.get_model_object("model_sampling")
    sigmas = nodes_custom_sampler.BasicScheduler.execute(model, "karras", 4, denoise=1.0)[0]
    assert torch.equal(sigmas, comfy.samplers.calculate_sigmas(model_sampling, "karras", 4).cpu())
    # denoise < 1: the last steps+1 sigmas of steps/denoise (ComfyUI's BasicScheduler)
    half = nodes_custom_sampler.BasicScheduler.execute(model, "normal", 3, 0.5)[0]
    assert torch.equal(half, comfy.samplers.calculate_sigmas(model_sampling, "normal", 6).cpu()[-4:])
    # the V1 alias is execute: the same result, on the class or an instance
    assert torch.equal(nodes_custom_sampler.BasicScheduler().get_sigmas(model, "karras", 4, 1.0)[0], sigmas)
    assert torch.equal(nodes_custom_sampler.BasicScheduler.get_sigmas(model=model, scheduler="karras", steps=4,
                                                                      denoise=1.0)[0], sigmas)
    high, low = nodes_custom_sampler.SplitSigmas.execute(sigmas, 2)
    assert torch.equal(high, sigmas[:3]) and torch.equal(low, sigmas[2:])
    assert torch.equal(nodes_custom_sampler.SplitSigmas.execute(sigmas, 2)[1], sigmas[2:])
    assert torch.equal(nodes_custom_sampler.SplitSigmas().get_sigmas(sigmas, 1)[0], sigmas[:2])


def test_primere_custom_sampler_advanced_chain_equals_the_native_nodes(sd1):
    from comfy_extras import nodes_custom_sampler as ncs

    from nodes.custom_sampling import sampler_custom_advanced

    model, positive, negative = sd1
    sigmas = ncs.BasicScheduler.execute(model, "normal", 2, denoise=1.0)[0]
    sampler = ncs.KSamplerSelect.execute("euler")[0]
    noise = ncs.RandomNoise.execute(7)[0]
    guider = ncs.CFGGuider.execute(model, positive, negative, 3.0)[0]
    assert noise.seed == 7 and guider.cfg == 3.0
    import comfy.sample

    latent = _latent()
    assert torch.equal(noise.generate_noise(latent), comfy.sample.prepare_noise(latent["samples"], 7))
    out, denoised = ncs.SamplerCustomAdvanced.execute(noise, guider, sampler, sigmas, latent)
    native = sampler_custom_advanced(noise, guider, sampler, sigmas, _latent())
    assert torch.equal(out["samples"], native[0]["samples"])
    assert torch.equal(denoised["samples"], native[1]["samples"])
    # the alias (`sample = execute`) and the V1-shaped EXECUTE_NORMALIZED give the same latent
    again = ncs.SamplerCustomAdvanced().sample(ncs.RandomNoise().get_noise(7)[0],
                                               ncs.CFGGuider().get_guider(model, positive, negative, 3.0)[0],
                                               ncs.KSamplerSelect().get_sampler("euler")[0], sigmas, _latent())
    assert torch.equal(again[0]["samples"], out["samples"])
    normalized = ncs.SamplerCustomAdvanced.EXECUTE_NORMALIZED(noise, guider, sampler, sigmas, _latent())
    assert isinstance(normalized, tuple) and torch.equal(normalized[0]["samples"], out["samples"])
    basic = ncs.BasicGuider.execute(model, positive)[0]
    assert torch.equal(ncs.SamplerCustomAdvanced.execute(noise, basic, sampler, sigmas, _latent())[0]["samples"],
                       sampler_custom_advanced(noise, basic, sampler, sigmas, _latent())[0]["samples"])


def test_primere_sampler_custom_execute_on_the_class(sd1):
    from comfy_extras import nodes_custom_sampler as ncs

    from nodes.custom_sampling import sampler_custom

    model, positive, negative = sd1
    sampler = ncs.KSamplerSelect.execute("euler")[0]
    sigmas = ncs.BasicScheduler.execute(model, "normal", 2, denoise=1.0)[0]
    # Primere: SamplerCustom.execute(model, False, seed, cfg, positive, negative, sampler, sigmas, latent)[0]
    for add_noise in (False, True):
        got = ncs.SamplerCustom.execute(model, add_noise, 11, 2.5, positive, negative, sampler, sigmas, _latent())[0]
        native = sampler_custom(model, add_noise, 11, 2.5, positive, negative, sampler, sigmas, _latent())[0]
        assert torch.equal(got["samples"], native["samples"])
    alias = ncs.SamplerCustom().sample(model, True, 11, 2.5, positive, negative, sampler, sigmas, _latent())
    assert type(alias).__name__ == "NodeOutput" and torch.equal(alias[0]["samples"], native["samples"])
    assert ncs.SamplerCustom.FUNCTION == "EXECUTE_NORMALIZED"
    out, denoised = ncs.SamplerCustom.execute(model=model, add_noise=True, noise_seed=11, cfg=2.5, positive=positive,
                                              negative=negative, sampler=sampler, sigmas=sigmas,
                                              latent_image=_latent())
    assert torch.equal(out["samples"], native["samples"])


def test_primere_image_stitch_and_resize_and_pad(session):
    from comfy_extras import nodes_images

    torch.manual_seed(0)
    image1, image2 = torch.rand(2, 4, 6, 3), torch.rand(2, 4, 5, 3)
    stitched = nodes_images.ImageStitch.execute(image1, "right", False, 0, "white", image2)[0]
    assert torch.equal(stitched, torch.cat([image1, image2], dim=2))
    assert torch.equal(nodes_images.ImageStitch.execute(image1, "left", False, 0, "white", image2)[0],
                       torch.cat([image2, image1], dim=2))
    assert torch.equal(nodes_images.ImageStitch.execute(image1, "down", True, 0, "white")[0], image1)  # no image2
    assert torch.equal(nodes_images.ImageStitch().stitch(image1, "right", False, 0, "white", image2)[0], stitched)

    image = torch.rand(1, 4, 8, 3)  # 8 wide, 4 high into 8x8: unscaled, 2 rows of padding above and below
    padded = nodes_images.ResizeAndPadImage.execute(image, 8, 8, "white", "area")[0]
    expected = torch.ones(1, 8, 8, 3)
    expected[:, 2:6] = image
    assert torch.allclose(padded, expected)
    black = nodes_images.ResizeAndPadImage().resize_and_pad(image, 8, 8, "black", "nearest-exact")[0]
    assert torch.equal(black[:, :2], torch.zeros(1, 2, 8, 3)) and torch.allclose(black[:, 2:6], image)

    batch = torch.rand(3, 2, 2, 3)
    assert torch.equal(nodes_images.ImageFromBatch.execute(batch, 1, 2)[0], batch[1:3])
    assert torch.equal(nodes_images.ImageFromBatch().frombatch(batch, 1, 2)[0], batch[1:3])
    width, height, count = nodes_images.GetImageSize.execute(torch.zeros(3, 5, 7, 3))
    assert (width, height, count) == (7, 5, 3)


def test_mask_nodes_are_v3_with_their_v1_aliases(session):
    from comfy_extras import nodes_mask

    mask = torch.zeros(1, 5, 5)
    mask[0, 2, 2] = 1.0
    grown = nodes_mask.GrowMask.execute(mask, 1, True)[0]
    cross = torch.zeros(1, 5, 5)
    cross[0, 1:4, 2] = 1.0
    cross[0, 2, 1:4] = 1.0  # tapered corners: the 4-neighbourhood
    assert torch.equal(grown, cross)
    assert torch.equal(nodes_mask.GrowMask().expand_mask(mask, 1, True)[0], grown)
    assert torch.equal(nodes_mask.InvertMask.execute(mask)[0], 1.0 - mask)
    assert torch.equal(nodes_mask.SolidMask().solid(0.5, 3, 2)[0], torch.full((1, 2, 3), 0.5))
    assert torch.equal(nodes_mask.ThresholdMask.image_to_mask(mask * 0.7, 0.5)[0], mask)


def test_audio_nodes_take_todays_parameter_order(session):
    from comfy_extras import nodes_audio

    a = {"waveform": torch.ones(1, 2, 4), "sample_rate": 8}
    b = {"waveform": torch.zeros(1, 2, 3), "sample_rate": 8}
    joined = nodes_audio.AudioConcat.execute(a, b, "after")[0]
    assert torch.equal(joined["waveform"], torch.cat([a["waveform"], b["waveform"]], dim=2))
    assert torch.equal(nodes_audio.AudioConcat().concat(a, b, "before")[0]["waveform"],
                       torch.cat([b["waveform"], a["waveform"]], dim=2))
    left, right = nodes_audio.SplitAudioChannels.execute({"waveform": torch.arange(8.).view(1, 2, 4), "sample_rate": 8})
    assert torch.equal(left["waveform"], torch.arange(4.).view(1, 1, 4))
    assert torch.equal(right["waveform"], torch.arange(4., 8.).view(1, 1, 4))
    trimmed = nodes_audio.TrimAudioDuration.trim({"waveform": torch.arange(16.).view(1, 1, 16), "sample_rate": 8},
                                                 0.5, 1.0)[0]
    assert torch.equal(trimmed["waveform"], torch.arange(4., 12.).view(1, 1, 8))
    assert nodes_audio.VAEDecodeAudio.__dict__["decode"] is nodes_audio.VAEDecodeAudio.__dict__["execute"]
    assert nodes_audio.LoadAudio.__dict__["load"] is nodes_audio.LoadAudio.__dict__["execute"]


@pytest.mark.parametrize(("node_id", "alias", "args", "expected"), [
    # DualModelGuider.execute(model, positive, cfg, model_negative=None, negative=None): the schema
    # lists model_negative second, today's execute puts the optional ones last
    ("DualModelGuider", "get_guider", ("m", "pos", 2.5), {"model": "m", "positive": "pos", "cfg": 2.5}),
    # VAEDecodeAudio.execute(vae, samples) / VAEEncodeAudio.execute(vae, audio): inputs are (samples, vae)
    ("VAEDecodeAudio", "decode", ("the vae", "the latent"), {"vae": "the vae", "samples": "the latent"}),
    ("VAEEncodeAudio", "encode", ("the vae", "the audio"), {"vae": "the vae", "audio": "the audio"}),
    # ControlNetApplySD3.execute(positive, negative, control_net, image, strength, start, end, vae=None)
    ("ControlNetApplySD3", "apply_controlnet", ("p", "n", "cn", "img", 0.5, 0.1, 0.9, "v"),
     {"positive": "p", "negative": "n", "control_net": "cn", "image": "img", "strength": 0.5,
      "start_percent": 0.1, "end_percent": 0.9, "vae": "v"}),
])
def test_positional_execute_follows_todays_order_not_the_inputs(session, node_id, alias, args, expected):
    from compat.node_facades import _builtin_function, _make_facade

    fn = _builtin_function(node_id)
    seen: dict = {}

    def recording(*call_args, **call_kwargs):
        seen.clear()
        seen.update(inspect.signature(fn).bind(*call_args, **call_kwargs).arguments)
        return ("result",)

    recording.__signature__ = inspect.signature(fn)
    facade = _make_facade(fn.__node_spec__, recording)
    assert facade.execute(*args)[0] == "result" and seen == expected
    assert getattr(facade, alias)(*args)[0] == "result" and seen == expected  # the alias is execute
    assert facade.EXECUTE_NORMALIZED(*args) == ("result",) and seen == expected
    with pytest.raises(TypeError):
        facade.execute(*args, *range(10))  # more than execute takes


def test_hunyuan_latents_and_v1_aliases(session):
    from comfy_extras import nodes_hunyuan

    latent = nodes_hunyuan.EmptyHunyuanLatentVideo.execute(64, 32, 9)[0]
    assert latent["samples"].shape == (1, 16, 3, 4, 8)
    assert nodes_hunyuan.EmptyHunyuanLatentVideo().generate(64, 32, 9, 2)[0]["samples"].shape == (2, 16, 3, 4, 8)
    assert nodes_hunyuan.EmptyHunyuanImageLatent.execute(64, 64)[0]["samples"].shape == (1, 64, 2, 2)


def test_upscale_model_and_sd3_aliases(session):
    from comfy_extras import nodes_sd3, nodes_upscale_model

    cls = nodes_upscale_model.ImageUpscaleWithModel
    assert cls.__dict__["upscale"] is cls.__dict__["execute"] and cls.FUNCTION == "EXECUTE_NORMALIZED"
    latent = nodes_sd3.EmptySD3LatentImage.generate(64, 32, 2)[0]["samples"]
    assert latent.shape == (2, 16, 4, 8) and not latent.any()


def test_model_advanced_nodes_stay_v1_today(session):
    from comfy_extras import nodes_model_advanced

    cls = nodes_model_advanced.ModelSamplingDiscrete
    assert cls.FUNCTION == "patch" and callable(cls().patch) and "execute" not in cls.__dict__


def test_node_output_indexes_and_unpacks_like_comfyuis():
    # ComfyUI's NodeOutput (comfy_api/latest/_io.py) defines __getitem__ only: indexing, slicing,
    # iteration and unpacking go through it; it has no __len__ (len() is a TypeError there too).
    from compat.v3.io import NodeOutput

    out = NodeOutput("a", "b", ui={"x": 1})
    first, second = out
    assert (first, second, out[0], out[-1], out[:1], list(out)) == ("a", "b", "a", "b", ("a",), ["a", "b"])
    with pytest.raises(ValueError):
        (only,) = out
    with pytest.raises(IndexError):
        out[2]
    with pytest.raises(TypeError):
        len(out)
    assert bool(NodeOutput())  # always truthy, as ComfyUI's
