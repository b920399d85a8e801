"""ComfyUI's `comfy.weight_adapter` over our LoRA parser and adapters, through the fixture pack
tests/compat/api_packs/adapter_pack: ComfyUI's loading loop over `adapters` finds each layer's
LoRA / LoHa / LoKr record with ComfyUI's classes, the adapters patch the model exactly as our
loader's do, `calculate_weight` is our maths, and the helper functions of `base` answer as
ComfyUI's (LyCORIS's factorization, the Tucker products)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "adapter_pack" / "__init__.py"


@pytest.fixture
def pack(session):
    spec = importlib.util.spec_from_file_location("adapter_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("adapter_pack_under_test", None)


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)[0]


def _mixed_lora(model) -> tuple[dict, dict]:
    """A file with a LoRA (with alpha), a LoHa and a LoKr record on three 2-D UNet weights."""
    from comfy_core.lora.keymap import unet_key_map

    key_map = unet_key_map(model.model)
    params = dict(model.model.named_parameters())
    layers = [k for k, v in key_map.items() if k.startswith("lora_unet_") and v.endswith("to_q.weight")
              and params[v].dim() == 2][:3]
    g = torch.Generator().manual_seed(5)
    lora = {}
    out, inp = params[key_map[layers[0]]].shape
    lora[f"{layers[0]}.lora_up.weight"] = torch.randn(out, 2, generator=g)
    lora[f"{layers[0]}.lora_down.weight"] = torch.randn(2, inp, generator=g)
    lora[f"{layers[0]}.alpha"] = torch.tensor(1.0)
    out, inp = params[key_map[layers[1]]].shape
    for name, shape in (("hada_w1_a", (out, 2)), ("hada_w1_b", (2, inp)), ("hada_w2_a", (out, 2)), ("hada_w2_b", (2, inp))):
        lora[f"{layers[1]}.{name}"] = torch.randn(*shape, generator=g) * 0.3
    out, inp = params[key_map[layers[2]]].shape
    lora[f"{layers[2]}.lokr_w1"] = torch.randn(2, 2, generator=g) * 0.3
    lora[f"{layers[2]}.lokr_w2"] = torch.randn(out // 2, inp // 2, generator=g) * 0.3
    return lora, {layer: key_map[layer] for layer in layers}


def test_comfyuis_loading_loop_finds_each_record_and_patches_as_our_loader(pack, sd1):
    from comfy_core.lora import load_lora_for_models

    lora, key_map = _mixed_lora(sd1)
    patches, loaded = pack.load_with_adapters(lora, key_map)
    assert pack.kinds_of(patches) == ["LoHaAdapter", "LoKrAdapter", "LoRAAdapter"]
    assert loaded == set(lora)
    (layer0, key0), (_, key1), (_, key2) = key_map.items()
    assert patches[key0].name == "lora" and patches[key0].weights[2] == 1.0 and patches[key0].loaded_keys is loaded
    ours = sd1.clone()
    assert sorted(ours.add_patches(patches, 0.7)) == sorted(key_map.values())
    expected = load_lora_for_models(sd1, None, lora, 0.7, 0.0)[0]
    with ours.applied() as a:
        got = {k: a.get_parameter(k).detach().clone() for k in key_map.values()}
    with expected.applied() as e:
        want = {k: e.get_parameter(k).detach().clone() for k in key_map.values()}
    base = dict(sd1.model.named_parameters())
    for k in key_map.values():
        assert torch.equal(got[k], want[k]) and not torch.equal(got[k], base[k])
    # a layer of another kind is not this class's: None, and nothing is marked loaded
    import comfy.weight_adapter

    assert comfy.weight_adapter.LoHaAdapter.load(layer0, lora, None, None, set()) is None
    assert comfy.weight_adapter.adapter_maps["LoKr"] is comfy.weight_adapter.LoKrAdapter


def test_calculate_weight_is_our_maths_and_a_misfit_keeps_the_weight(pack, caplog):
    import comfy.weight_adapter
    from comfy_core.weights.adapters import LoraAdapter
    from comfy_core.weights.function import identity

    g = torch.Generator().manual_seed(1)
    up, down = torch.randn(4, 2, generator=g), torch.randn(2, 3, generator=g)
    lora = {"x.lora_up.weight": up, "x.lora_down.weight": down}
    adapter = comfy.weight_adapter.LoRAAdapter.load("x", lora, 4.0, None)  # the caller's alpha
    weight = torch.randn(4, 3, generator=g)
    got = adapter.calculate_weight(weight.clone(), "x", 0.5, 1.0, None, None)
    assert torch.allclose(got, weight + 0.5 * (4.0 / 2) * up @ down)
    assert torch.equal(got, LoraAdapter(up, down, 4.0).apply_to(weight.clone(), 0.5, identity))
    wrong = torch.randn(5, 3)
    assert torch.equal(adapter.calculate_weight(wrong.clone(), "x", 1.0, 1.0, None, None), wrong)
    assert "ERROR lora x" in caplog.text
    direct = comfy.weight_adapter.LoRAAdapter(set(), (up, down, 2.0, None, None, None))  # ComfyUI's constructor
    assert torch.allclose(direct.calculate_weight(weight.clone(), "x", 1.0, 1.0, None, None), weight + up @ down)


def test_glora_oft_and_boft_records_load_with_comfyuis_classes_and_patch_as_our_loader(pack, sd1):
    """ComfyUI's loop over `adapters` (LoRA, LoHa, LoKr, GLoRA, OFT, BOFT) finds each kind; the
    patches equal our loader's; `calculate_weight` of ComfyUI's constructor is the same maths."""
    import comfy.weight_adapter
    from comfy_core.lora import load_lora_for_models
    from comfy_core.lora.keymap import unet_key_map

    key_map = unet_key_map(sd1.model)
    params = dict(sd1.model.named_parameters())
    layers = [k for k, v in key_map.items() if k.startswith("lora_unet_") and v.endswith(("to_q.weight", "to_k.weight"))
              and params[v].dim() == 2][:3]
    g = torch.Generator().manual_seed(8)
    (out0, inp0), (out1, _), (out2, _) = (params[key_map[x]].shape for x in layers)
    lora = {f"{layers[0]}.a1.weight": torch.randn(inp0, 2, generator=g) * 0.2,
            f"{layers[0]}.a2.weight": torch.randn(2, inp0, generator=g) * 0.2,
            f"{layers[0]}.b1.weight": torch.randn(out0, 2, generator=g) * 0.2,
            f"{layers[0]}.b2.weight": torch.randn(2, inp0, generator=g) * 0.2,
            f"{layers[1]}.oft_blocks": torch.randn(4, out1 // 4, out1 // 4, generator=g) * 0.2,
            f"{layers[1]}.alpha": torch.tensor(0.0),
            f"{layers[2]}.oft_blocks": torch.randn(2, out2 // 4, 4, 4, generator=g) * 0.2}
    patches, loaded = pack.load_with_adapters(lora, {x: key_map[x] for x in layers})
    assert pack.kinds_of(patches) == ["BOFTAdapter", "GLoRAAdapter", "OFTAdapter"] and loaded == set(lora)
    assert [a.__name__ for a in comfy.weight_adapter.adapters][3:] == ["GLoRAAdapter", "OFTAdapter", "BOFTAdapter"]
    ours = sd1.clone()
    ours.add_patches(patches, 0.6)
    expected = load_lora_for_models(sd1, None, lora, 0.6, 0.0)[0]
    with ours.applied() as a, torch.no_grad():
        got = {key_map[x]: a.get_parameter(key_map[x]).detach().clone() for x in layers}
    with expected.applied() as e, torch.no_grad():
        want = {key_map[x]: e.get_parameter(key_map[x]).detach().clone() for x in layers}
    for k in got:
        assert torch.equal(got[k], want[k]) and not torch.equal(got[k], params[k])
    blocks = lora[f"{layers[1]}.oft_blocks"]
    direct = comfy.weight_adapter.OFTAdapter(set(), (blocks, None, 0.0, None))  # ComfyUI's constructor
    w = params[key_map[layers[1]]].detach().clone()
    assert torch.equal(direct.calculate_weight(w.clone(), "k", 0.6, 1.0, None, None),
                       patches[key_map[layers[1]]].calculate_weight(w.clone(), "k", 0.6, 1.0, None, None))


def test_base_helpers_answer_as_comfyuis(pack):
    from comfy.weight_adapter import base

    # as ComfyUI's code computes it (its docstring's table, LyCORIS's, says (8, 45) and (12, 30) for 360)
    table = {-1: {127: (1, 127), 128: (8, 16), 250: (10, 25), 360: (18, 20), 512: (16, 32), 1024: (32, 32), 12: (3, 4)},
             2: {128: (2, 64), 250: (2, 125), 1024: (2, 512)},
             4: {128: (4, 32), 250: (2, 125), 360: (4, 90), 1024: (4, 256)},
             8: {128: (8, 16), 250: (5, 50), 360: (8, 45), 512: (8, 64)},
             16: {128: (8, 16), 250: (10, 25), 360: (15, 24), 512: (16, 32), 1024: (16, 64)},
             6: {12: (3, 4), 36: (6, 6)}}
    for factor, rows in table.items():
        for dimension, pair in rows.items():
            assert base.factorization(dimension, factor) == pair, (dimension, factor)
    g = torch.Generator().manual_seed(2)
    t, wa, wb = torch.randn(2, 3, 3, 3, generator=g), torch.randn(2, 5, generator=g), torch.randn(3, 4, generator=g)
    expected = torch.zeros(5, 4, 3, 3)
    for i in range(2):
        for j in range(3):
            expected += wa[i][:, None, None, None] * wb[j][None, :, None, None] * t[i, j]
    assert torch.allclose(base.tucker_weight(wa, wb, t), expected, atol=1e-5)
    up, down, mid = torch.randn(5, 2, 1, 1, generator=g), torch.randn(3, 4, 1, 1, generator=g), torch.randn(2, 3, 3, 3, generator=g)
    conv = base.tucker_weight_from_conv(up, down, mid)
    assert conv.shape == (5, 4, 3, 3)
    assert torch.allclose(conv, torch.einsum("om,mnhw,ni->oihw", up[:, :, 0, 0], mid, down[:, :, 0, 0]), atol=1e-5)
