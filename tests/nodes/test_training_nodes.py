"""TrainLoraNode, LoraModelLoader, SaveLoRA and LossGraphNode (today's ComfyUI's
comfy_extras/nodes_train.py) on the tiny random SD1 checkpoint: training lowers the model's
denoising loss, leaves the base weights bit-identical, saves ComfyUI's keys that LoraLoader
reads back to the same model, resumes, accumulates gradients as a bigger batch would, reports
progress and stops when interrupted; the loss graph follows the losses."""
from __future__ import annotations

import re
import shutil

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from comfy_core.training.trainer import TrainSettings, TrainingLoop, train_lora
from graph.context import Interrupted, NodeContext, reset_current, set_current
from nodes.dataset_training_nodes import make_training_dataset, resolution_bucket
from nodes.errors import NodeInputError
from nodes.patching import lora_loader
from nodes.training_nodes import loss_graph, lora_model_loader, save_lora, train_lora_node
from tests.nodes.node_context import folders_env

FP32 = dict(training_dtype="fp32", lora_dtype="fp32")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # the tiny model's ops are microseconds: torch's thread pool only costs time on a busy 2-core machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from types import SimpleNamespace

    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, vae = load_checkpoint(tiny_sd1_ckpt)
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, 8, 8, generator=g) * 5.0  # VAE space: x 0.18215 in model space
    return SimpleNamespace(model=model, clip=clip, vae=vae, latents=latents,
                           cube=clip_text_encode("a red cube", clip)[0], ball=clip_text_encode("a blue ball", clip)[0])


@pytest.fixture
def env(tmp_path):
    environment = folders_env(tmp_path)
    (tmp_path / "base" / "models" / "loras").mkdir(parents=True, exist_ok=True)
    token = set_current(NodeContext("p", "7", "7", None, environment, class_type="TrainLoraNode"))
    yield environment
    reset_current(token)


def node_inputs(model, latents, positive, **settings):
    """TrainLoraNode's arguments as the executor hands a list node its inputs (every one a list)."""
    values = dict(batch_size=1, grad_accumulation_steps=1, steps=4, learning_rate=0.001, rank=4, optimizer="AdamW",
                  loss_function="MSE", seed=0, training_dtype="fp32", lora_dtype="fp32", quantized_backward=False,
                  algorithm="LoRA", gradient_checkpointing=False, checkpoint_depth=1, offloading=False,
                  existing_lora="[None]", bucket_mode=False, bypass_mode=False)
    values.update(settings)
    return dict(model=[model], latents=latents, positive=positive, **{k: [v] for k, v in values.items()})


def denoise_loss(model, latents, cond, sigmas=(0.5, 2.0)) -> float:
    """An independent x0 loss on fixed noise: the model's denoised output of `x0 + sigma * noise`
    against x0 (eps prediction), averaged over `sigmas`."""
    g = torch.Generator().manual_seed(123)
    x0 = latents * 0.18215
    noise = torch.randn(x0.shape, generator=g)
    context = cond[0][0].repeat(x0.shape[0], 1, 1)
    total = 0.0
    with torch.no_grad(), model.applied() as dm:
        for s in sigmas:
            sigma = torch.full((x0.shape[0],), s)
            total += torch.mean((dm.apply_model(x0 + s * noise, sigma, context) - x0) ** 2).item()
    return total / len(sigmas)


def denoised(model, latents, cond) -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(latents.shape, generator=g)
    with torch.no_grad(), model.applied() as dm:
        return dm.apply_model(x, torch.full((x.shape[0],), 1.5), cond[0][0].repeat(x.shape[0], 1, 1))


def weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.model.state_dict().items()}


# -- training ----------------------------------------------------------------------------------

def test_training_lowers_the_denoising_loss_and_leaves_the_base_weights_bit_identical(sd1, env):
    before = weights(sd1.model)
    flags = {n: p.requires_grad for n, p in sd1.model.model.named_parameters()}
    lora, loss_map, steps = train_lora_node(**node_inputs(sd1.model, [{"samples": sd1.latents}], [sd1.cube],
                                                          batch_size=2, steps=12, learning_rate=0.003))
    assert steps == 12 and len(loss_map["loss"]) == 12 and all(isinstance(v, float) for v in loss_map["loss"])
    trained = lora_model_loader(sd1.model, lora, 1.0)[0]
    base_loss, trained_loss = denoise_loss(sd1.model, sd1.latents, sd1.cube), denoise_loss(trained, sd1.latents,
                                                                                            sd1.cube)
    assert trained_loss < 0.9 * base_loss, (base_loss, trained_loss)
    after = weights(sd1.model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert flags == {n: p.requires_grad for n, p in sd1.model.model.named_parameters()}
    assert sd1.model.patches == {} and not sd1.model.injections
    assert torch.equal(denoised(sd1.model, sd1.latents, sd1.cube),
                       denoised(sd1.model.clone(), sd1.latents, sd1.cube))  # nothing left on the module


def test_the_state_dict_has_comfyuis_keys_and_loraloader_reproduces_the_trained_model(sd1, env, tmp_path):
    result = train_lora(sd1.model, [sd1.latents], sd1.cube, TrainSettings(steps=3, rank=4, learning_rate=0.01,
                                                                         gradient_checkpointing=False, **FP32))
    lora = result.lora
    layer = "diffusion_model.input_blocks.1.1.proj_in"  # a linear or 1x1 conv of the first transformer
    assert {f"{layer}.lora_up.weight", f"{layer}.lora_down.weight", f"{layer}.alpha", f"{layer}.diff_b"} <= set(lora)
    assert lora[f"{layer}.lora_up.weight"].shape[1] == 4 and lora[f"{layer}.alpha"].item() == 1.0
    conv = "diffusion_model.input_blocks.0.0"  # conv_in 3x3: ComfyUI's flat down [rank, in*3*3]
    assert lora[f"{conv}.lora_down.weight"].shape == (4, 4 * 9)
    norm = "diffusion_model.out.0"  # the final GroupNorm: its scale and shift as full diffs
    assert set(k for k in lora if k.startswith(norm + ".")) == {f"{norm}.diff", f"{norm}.diff_b"}
    names = [re.fullmatch(r"(diffusion_model\..+)\.(lora_up\.weight|lora_down\.weight|alpha|diff|diff_b)", k)
             for k in lora]
    assert all(names) and {m.group(2) for m in names} == {"lora_up.weight", "lora_down.weight", "alpha", "diff",
                                                          "diff_b"}
    assert result.layers == len({m.group(1) for m in names}) > 100
    assert lora[f"{layer}.lora_down.weight"].abs().sum() > 0  # trained away from the zero start

    save_lora(lora, "loras/ComfyUI_trained_lora", steps=3)
    saved = list((tmp_path / "base" / "output" / "loras").iterdir())
    assert [p.name for p in saved] == ["ComfyUI_trained_lora_3_steps_00001_.safetensors"]
    on_disk = load_file(str(saved[0]))
    assert on_disk.keys() == lora.keys() and all(torch.equal(on_disk[k], lora[k]) for k in lora)

    shutil.copy(saved[0], tmp_path / "base" / "models" / "loras" / saved[0].name)
    loaded, _clip = lora_loader(sd1.model, sd1.clip, saved[0].name, 1.0, 0.0)
    want = denoised(result.model, sd1.latents, sd1.cube)  # the trained adapters, at forward time
    assert not torch.allclose(want, denoised(sd1.model, sd1.latents, sd1.cube), atol=1e-4)
    assert torch.allclose(denoised(loaded, sd1.latents, sd1.cube), want, atol=1e-4, rtol=1e-4)
    merged = lora_model_loader(sd1.model, lora, 1.0)[0]
    assert torch.allclose(denoised(merged, sd1.latents, sd1.cube), want, atol=1e-4, rtol=1e-4)


def test_lora_model_loader_applies_at_a_strength(sd1, env):
    g = torch.Generator().manual_seed(3)
    layer = "diffusion_model.input_blocks.1.1.proj_in"
    weight = sd1.model.model.get_submodule(layer).weight
    out_dim, in_dim = weight.shape[0], weight[0].numel()
    up, down = torch.randn(out_dim, 2, generator=g), torch.randn(2, in_dim, generator=g)
    lora = {f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down, f"{layer}.alpha": torch.tensor(1.0)}
    assert lora_model_loader(sd1.model, lora, 0.0)[0] is sd1.model  # strength 0: the base model itself
    for strength in (0.5, -1.0):
        model = lora_model_loader(sd1.model, lora, strength)[0]
        with model.applied() as dm:
            got = dm.get_submodule(layer).weight.detach().clone()
        want = weight + strength * (1.0 / 2) * (up @ down).reshape(weight.shape)  # W + s * alpha / rank * up @ down
        assert torch.allclose(got, want, atol=1e-5)
    bypass = lora_model_loader(sd1.model, lora, 0.5, bypass=True)[0]
    merged = lora_model_loader(sd1.model, lora, 0.5)[0]
    assert torch.allclose(denoised(bypass, sd1.latents, sd1.cube), denoised(merged, sd1.latents, sd1.cube), atol=1e-5)
    with bypass.applied() as dm:
        assert torch.equal(dm.get_submodule(layer).weight, weight)  # bypass: the weight untouched


def test_existing_lora_resumes_its_tensors_and_adds_its_steps(sd1, env, tmp_path):
    lora, _map, steps = train_lora_node(**node_inputs(sd1.model, [{"samples": sd1.latents}], [sd1.cube], steps=2,
                                                      learning_rate=0.01))
    save_lora(lora, "loras/ComfyUI_trained_lora", steps=steps)
    saved = tmp_path / "base" / "output" / "loras" / "ComfyUI_trained_lora_2_steps_00001_.safetensors"
    shutil.copy(saved, tmp_path / "base" / "models" / "loras" / saved.name)
    resumed, loss_map, total = train_lora_node(**node_inputs(
        sd1.model, [{"samples": sd1.latents}], [sd1.cube], steps=1, optimizer="SGD", learning_rate=1e-7,
        existing_lora=saved.name))
    assert total == 3 and len(loss_map["loss"]) == 1
    assert resumed.keys() == lora.keys()
    assert all(torch.allclose(resumed[k], lora[k], atol=1e-5) for k in lora)  # continued from the file
    assert any(lora[k].abs().sum() > 0 for k in lora if k.endswith("lora_down.weight"))


def test_gradient_accumulation_of_k_equals_one_step_of_k_times_the_batch(sd1, monkeypatch):
    g = torch.Generator().manual_seed(9)
    noise, sigmas = torch.randn(2, 4, 8, 8, generator=g), torch.tensor([0.8, 3.0])

    def two_singles(self, step, generator, dm):  # micro-step i: sample i, its noise and sigma
        return [(self.dataset.samples[[step]], [step], noise[[step]], sigmas[[step]])]

    def one_pair(self, step, generator, dm):
        return [(self.dataset.samples[[0, 1]], [0, 1], noise, sigmas)]

    sgd = dict(optimizer="SGD", learning_rate=0.05, rank=2, gradient_checkpointing=False, **FP32)
    monkeypatch.setattr(TrainingLoop, "draw", two_singles)
    accumulated = train_lora(sd1.model, [sd1.latents], sd1.cube, TrainSettings(steps=1, grad_accumulation_steps=2,
                                                                              batch_size=1, **sgd))
    monkeypatch.setattr(TrainingLoop, "draw", one_pair)
    batched = train_lora(sd1.model, [sd1.latents], sd1.cube, TrainSettings(steps=1, batch_size=2, **sgd))
    assert len(accumulated.losses) == 2 and len(batched.losses) == 1
    assert abs(sum(accumulated.losses) / 2 - batched.losses[0]) < 1e-4 * batched.losses[0]
    moved = [k for k in batched.lora if k.endswith("lora_down.weight")]  # zeros at the start
    assert all(torch.allclose(accumulated.lora[k], batched.lora[k], atol=1e-6, rtol=1e-4) for k in batched.lora)
    assert any(batched.lora[k].abs().sum() > 0 for k in moved)


@pytest.mark.parametrize("kind", ["eps", "v", "flow"])
def test_the_loss_follows_the_models_sampling_type(sd1, monkeypatch, kind):
    # The first step runs the untrained adapters (zero deltas), so its loss is the base model's on
    # x_t built by hand for the sampling type, against the clean latent in model space.
    from comfy_core.models.model_sampling import FlowModelSampling, ModelSampling

    model = sd1.model.clone()
    sampling = {"eps": None, "v": ModelSampling("v"), "flow": FlowModelSampling(shift=3.0)}[kind]
    if sampling is not None:
        model.add_object_patch("model_sampling", sampling)
    g = torch.Generator().manual_seed(11)
    noise = torch.randn(2, 4, 8, 8, generator=g)
    sigmas = torch.tensor([0.3, 0.7]) if kind == "flow" else torch.tensor([0.5, 4.0])
    monkeypatch.setattr(TrainingLoop, "draw",
                        lambda self, step, generator, dm: [(self.dataset.samples[[0, 1]], [0, 1], noise, sigmas)])
    result = train_lora(model, [sd1.latents], sd1.cube, TrainSettings(steps=1, batch_size=2, rank=2,
                                                                      gradient_checkpointing=False, **FP32))
    x0 = sd1.latents * 0.18215
    s = sigmas.reshape(2, 1, 1, 1)
    xt = s * noise + (1 - s) * x0 if kind == "flow" else x0 + s * noise
    with torch.no_grad(), model.applied() as dm:
        prediction = dm.apply_model(xt, sigmas, sd1.cube[0][0].repeat(2, 1, 1))
    assert result.losses[0] == pytest.approx(torch.mean((prediction - x0) ** 2).item(), rel=1e-5)


def test_gradient_checkpointing_changes_memory_not_results(sd1):
    settings = dict(steps=2, rank=2, learning_rate=0.01, **FP32)
    plain = train_lora(sd1.model, [sd1.latents], sd1.cube, TrainSettings(gradient_checkpointing=False, **settings))
    for depth in (1, 3):
        checked = train_lora(sd1.model, [sd1.latents], sd1.cube,
                             TrainSettings(gradient_checkpointing=True, checkpoint_depth=depth, **settings))
        assert checked.losses == pytest.approx(plain.losses, rel=1e-5)
        assert all(torch.allclose(checked.lora[k], plain.lora[k], atol=1e-6) for k in plain.lora)
    assert "forward" not in vars(sd1.model.model.diffusion_model) or \
        vars(sd1.model.model.diffusion_model)["forward"].__func__ is type(sd1.model.model.diffusion_model).forward


def test_training_from_the_dataset_nodes_with_captions_buckets_and_other_algorithms(sd1, env):
    images = [torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    latents, conditioning = make_training_dataset(images, [sd1.vae], [sd1.clip], ["a red cube", "a blue ball"])
    lora, loss_map, _ = train_lora_node(**node_inputs(sd1.model, latents, conditioning, batch_size=2, steps=1,
                                                      training_dtype="bf16", lora_dtype="bf16",
                                                      gradient_checkpointing=True))
    assert len(loss_map["loss"]) == 1 and all(v.dtype == torch.bfloat16 for v in lora.values())
    small = {"samples": torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(4))}
    buckets, bucket_conds = resolution_bucket(latents + [small], conditioning + [sd1.ball])
    _lora, loss_map, _ = train_lora_node(**node_inputs(sd1.model, buckets, bucket_conds, batch_size=2, steps=2,
                                                       bucket_mode=True))
    assert len(loss_map["loss"]) == 2
    _lora, loss_map, _ = train_lora_node(**node_inputs(sd1.model, latents + [small], conditioning + [sd1.ball],
                                                       steps=1, batch_size=3))  # sizes differ: one at a time
    assert len(loss_map["loss"]) == 1
    for algorithm, key in (("LoHa", "hada_w2_b"), ("LoKr", "lokr_w2")):
        lora, _map, _ = train_lora_node(**node_inputs(sd1.model, latents, conditioning, steps=1,
                                                      algorithm=algorithm))
        assert any(k.endswith(key) for k in lora) and not any("lora_up" in k for k in lora)
        merged = lora_model_loader(sd1.model, lora, 1.0)[0]
        bypass = lora_model_loader(sd1.model, lora, 1.0, bypass=True)[0]
        assert torch.allclose(denoised(merged, sd1.latents, sd1.cube), denoised(bypass, sd1.latents, sd1.cube),
                              atol=1e-4, rtol=1e-4)


def test_progress_is_reported_per_step_and_an_interrupt_stops_the_run(sd1, tmp_path):
    environment = folders_env(tmp_path)
    reports: list = []
    stop_after = {"n": 10 ** 9}

    def report(value, total, preview):
        reports.append((value, total))

    ctx = NodeContext("p", "7", "7", None, environment, report=report,
                      is_interrupted=lambda: len(reports) >= stop_after["n"], class_type="TrainLoraNode")
    token = set_current(ctx)
    try:
        train_lora_node(**node_inputs(sd1.model, [{"samples": sd1.latents}], [sd1.cube], steps=2,
                                      grad_accumulation_steps=2))
        assert reports == [(1, 4), (2, 4), (3, 4), (4, 4)]
        reports.clear()
        stop_after["n"] = 1
        before = weights(sd1.model)
        with pytest.raises(Interrupted):
            train_lora_node(**node_inputs(sd1.model, [{"samples": sd1.latents}], [sd1.cube], steps=5))
        assert reports == [(1, 5)]
        after = weights(sd1.model)
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert all(p.requires_grad for p in sd1.model.model.parameters())
    finally:
        reset_current(token)


def test_bad_input_gives_a_clear_error(sd1, env):
    latent = [{"samples": sd1.latents}]
    three = [sd1.cube + sd1.ball + sd1.cube]
    with pytest.raises(NodeInputError, match="Number of positive conditions \\(3\\) does not match number of "
                                             "images \\(2\\)") as info:
        train_lora_node(**node_inputs(sd1.model, latent, three))
    assert info.value.input_name == "positive"
    for name, value in (("rank", 0), ("steps", 0), ("batch_size", 0), ("learning_rate", 0.0)):
        with pytest.raises(NodeInputError) as info:
            train_lora_node(**node_inputs(sd1.model, latent, [sd1.cube], **{name: value}))
        assert info.value.input_name == name and name in str(info.value)
    with pytest.raises(NodeInputError, match="LoRA, LoHa, LoKr") as info:
        train_lora_node(**node_inputs(sd1.model, latent, [sd1.cube], algorithm="OFT"))
    assert info.value.input_name == "algorithm"
    with pytest.raises(NodeInputError) as info:
        train_lora_node(**node_inputs(sd1.model, [{"latent": 1}], [sd1.cube]))
    assert info.value.input_name == "latents"
    with pytest.raises(NodeInputError, match="steps") as info:
        train_lora_node(**node_inputs(sd1.model, latent, [sd1.cube], existing_lora="style.safetensors"))
    assert info.value.input_name == "existing_lora"
    with pytest.raises(NodeInputError):
        lora_model_loader(sd1.model, {"x": 1}, 1.0)
    with pytest.raises(NodeInputError):
        loss_graph({"loss": []}, "loss_graph")


# -- the forward-time adapters (comfy_core/patching/bypass.py, norms_and_biases) ---------------------

def test_norm_and_bias_diffs_and_flat_conv_loras_bypass_as_merging_them():
    from torch import nn

    from comfy_core.patching import ModelPatcher
    from comfy_core.patching.bypass import add_bypass
    from comfy_core.weights.adapters import LoraAdapter

    torch.manual_seed(0)
    root = nn.Module()
    root.diffusion_model = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.GroupNorm(2, 6), nn.Flatten(2))
    root.head = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 5))
    base = ModelPatcher(root)
    g = torch.Generator().manual_seed(1)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.5  # noqa: E731
    patches = {"diffusion_model.0.weight": LoraAdapter(r(6, 2), r(2, 4 * 9), 1.0),  # ComfyUI's flat conv down
               "diffusion_model.0.bias": ("diff", (r(6),)),
               "diffusion_model.1.weight": ("diff", (r(6),)), "diffusion_model.1.bias": ("diff", (r(6),)),
               "head.0.weight": ("diff", (r(16),)), "head.0.bias": ("diff", (r(16),)),
               "head.1.weight": LoraAdapter(r(5, 2), r(2, 16), 4.0), "head.1.bias": ("diff", (r(5),))}
    merged, bypass = base.clone(), base.clone()
    merged.add_patches(patches, 0.7)
    assert add_bypass(bypass, patches, 0.7, norms_and_biases=True) == (len(patches), [])
    assert add_bypass(base.clone(), patches, 0.7)[1] != []  # LoraLoaderBypass's default leaves diffs out

    def run(p):
        with torch.no_grad(), p.applied() as m:
            return m.head(m.diffusion_model(x))

    x = torch.randn(2, 4, 4, 4, generator=g)
    plain, want, got = run(base), run(merged), run(bypass)
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, plain, atol=1e-3)


# -- the loss graph ------------------------------------------------------------------------------

def test_loss_graph_draws_the_curve_through_the_scaled_losses(env, tmp_path):
    losses = [1.0, 0.5, 0.0, 0.25]
    out = loss_graph({"loss": losses}, "loss_graph")
    (entry,) = out["ui"]["images"]
    assert entry["type"] == "temp" and re.fullmatch(r"ComfyUI_temp_\w+_00001_\.png", entry["filename"])
    image = Image.open(tmp_path / "base" / "temp" / entry["subfolder"] / entry["filename"]).convert("RGB")
    assert image.size == (840, 520)
    pixels = image.load()
    # step i at x = 40 + int(i / 4 * 800), loss l at y = 480 - int((l - min) / (max - min) * 480)
    for x, y in ((240, 240), (540, 420)):  # the vertex of step 1, halfway from step 2 to step 3
        assert pixels[x, y] == (0, 0, 255), (x, y, pixels[x, y])
    assert pixels[340, 360] == (0, 0, 255)  # halfway between steps 1 and 2: the line at y 360
    assert pixels[340, 200] == (255, 255, 255) and pixels[20, 100] == (255, 255, 255)
    assert all(pixels[40, y] == (0, 0, 0) for y in (50, 300))  # the y axis
    assert all(pixels[x, 480] == (0, 0, 0) for x in (100, 800))  # the x axis
    rising = loss_graph({"loss": [0.0, 2.0]}, "loss_graph")["ui"]["images"][0]
    flat = Image.open(tmp_path / "base" / "temp" / rising["subfolder"] / rising["filename"]).convert("RGB").load()
    assert flat[240, 240] == (0, 0, 255)  # from (40, 480) up to (440, 0): the midpoint


# -- through the executor, and as packs import them --------------------------------------------------

async def test_a_training_workflow_through_the_executor(tiny_sd1_ckpt, tmp_path):
    from graph.executor import Executor
    from graph.registry import Registry
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path / "base")
    env.ensure_dirs()
    (tmp_path / "base" / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "base" / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    train = node_inputs("m", "l", "c", steps=2)
    train_inputs = {k: (v[0] if isinstance(v, list) else v) for k, v in train.items()}
    train_inputs.update(model=["1", 0], latents=["3", 0], positive=["2", 0])
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red cube", "clip": ["1", 1]}},
        "3": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "4": {"class_type": "TrainLoraNode", "inputs": train_inputs},
        "5": {"class_type": "SaveLoRA", "inputs": {"lora": ["4", 0], "prefix": "loras/ComfyUI_trained_lora",
                                                   "steps": ["4", 2]}},
        "6": {"class_type": "LossGraphNode", "inputs": {"loss": ["4", 1], "filename_prefix": "loss_graph"}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "p", outputs=checked.outputs)
    assert outcome.status == "success", outcome.messages
    saved = [p.name for p in (tmp_path / "base" / "output" / "loras").iterdir()]
    assert saved == ["ComfyUI_trained_lora_2_steps_00001_.safetensors"]
    assert any(p.suffix == ".png" for p in (tmp_path / "base" / "temp").rglob("*"))


def test_comfy_extras_nodes_train_names_the_nodes_as_comfyui(comfy_nodes):
    import comfy_extras.nodes_train as nodes_train

    for node_id in ("TrainLoraNode", "LoraModelLoader", "SaveLoRA", "LossGraphNode"):
        cls = nodes_train.NODE_CLASS_MAPPINGS[node_id]
        assert cls.__name__ == node_id and getattr(nodes_train, node_id) is cls
        assert comfy_nodes.NODE_CLASS_MAPPINGS[node_id] is cls
