"""Partial loading on the CPU: "cpu:0" computes and "cpu" rests (the same memory), and the weight
copies are counted through the manager's `stream_copy`, so the policy and the streaming hooks
run for real without a GPU: plans by mode, streamed modules run and give the fully loaded
module's output, LoRA-patched weights are what gets streamed, reporting, OOM fallback."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from comfy_core.memory import MemoryManager
from comfy_core.memory_plan import VramMode
from comfy_core.memory_stream import WeightStreamer, module_costs
from comfy_core.patching import ModelPatcher
from comfy_core.patching.clip import ClipPatcher


class TinyUNetLike(nn.Module):
    """Conv in, a GroupNorm + conv residual block, a cross-attention-like linear pair, conv out."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 8, 1, 1) * 0.1)  # read by the parent: never streamed
        self.conv_in = nn.Conv2d(4, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.to_q = nn.Linear(8, 8)
        self.proj = nn.Linear(8, 8)
        self.conv_out = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, 4, H, W]
        h = self.conv_in(x) + self.pos
        h = h + self.conv(torch.nn.functional.silu(self.norm(h)))
        t = h.permute(0, 2, 3, 1)  # [B, H, W, C]
        t = self.proj(torch.softmax(self.to_q(t), dim=-1))
        return self.conv_out(h + t.permute(0, 3, 1, 2))


class Counter:
    def __init__(self) -> None:
        self.copies = 0

    def __call__(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        self.copies += 1
        return tensor.clone()  # a real copy: the module must read the copy, not the host tensor


def _net(seed: int = 0) -> TinyUNetLike:
    torch.manual_seed(seed)
    return TinyUNetLike()


def _manager(mode: str, budget: int | None = 10 ** 9, **kwargs) -> tuple[MemoryManager, Counter]:
    counter = Counter()
    return MemoryManager(device="cpu:0", offload_device="cpu", budget_bytes=budget, mode=mode, partial_floor=0,
                         stream_copy=counter, **kwargs), counter


X = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(1))


def test_module_costs_mark_layers_streamable_and_the_first_parameter_resident():
    costs = {c.name: c for c in module_costs(_net())}
    assert set(costs) == {"", "conv_in", "norm", "conv", "to_q", "proj", "conv_out"}
    assert not costs[""].streamable  # the parent's own parameter (and the model's first one)
    assert costs["conv"].streamable and costs["norm"].streamable and costs["proj"].streamable
    assert costs["conv"].nbytes == (8 * 8 * 9 + 8) * 4


def test_streamer_copies_per_call_and_puts_host_tensors_back():
    net = _net()
    expected = net(X)
    host = {n: p for n, p in net.named_parameters()}
    counter = Counter()
    streamer = WeightStreamer([net.conv, net.proj], "cpu:0", copy=counter).install()
    seen = {}
    net.conv.register_forward_pre_hook(lambda m, a: seen.update(conv=m.weight))  # runs after the streamer's
    with torch.no_grad():
        out = net(X)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert counter.copies == 4 and streamer.stats.forwards == 2  # weight + bias of two modules
    assert seen["conv"] is not host["conv.weight"]  # the forward read the streamed copy
    assert all(p is host[n] for n, p in net.named_parameters())  # host tensors back after the call
    streamer.remove()
    net(X)
    assert counter.copies == 4  # no hooks left


def test_streamer_restores_host_tensors_when_the_forward_raises():
    net = _net()
    host = net.proj.weight
    streamer = WeightStreamer([net.proj], "cpu:0", copy=Counter()).install()
    with pytest.raises(RuntimeError):
        net.proj(torch.zeros(3, 5))  # wrong width
    assert net.proj.weight is host
    streamer.remove()


def _applied_output(patcher: ModelPatcher) -> torch.Tensor:
    with torch.no_grad(), patcher.applied() as module:
        return module(X)


def test_lowvram_loads_in_part_and_matches_the_full_load():
    expected = _net()(X)
    full = _net()
    size = sum(p.numel() * 4 for p in full.parameters())
    memory, counter = _manager("lowvram", budget=size // 2)
    patcher = memory.track(ModelPatcher(full))
    out = _applied_output(patcher)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    plan = memory.plan_for(patcher)
    assert plan is not None and plan.streamed and plan.resident_bytes < size // 2
    assert "" in plan.resident  # the parent's own parameter stays
    assert counter.copies > 0
    assert patcher.loaded_size() == plan.resident_bytes
    # hooks were removed when the application ended
    before = counter.copies
    full(X)
    assert counter.copies == before
    # a second use streams again, with the same result
    torch.testing.assert_close(_applied_output(patcher), expected, rtol=1e-5, atol=1e-6)
    assert counter.copies > before


def test_lora_patched_weights_are_what_gets_streamed():
    base = _net()
    delta = torch.randn(8, 8, generator=torch.Generator().manual_seed(5)) * 0.5
    reference = _net()
    with torch.no_grad():
        reference.proj.weight += delta
    expected = reference(X)

    memory, counter = _manager("novram")
    patcher = memory.track(ModelPatcher(base))
    patcher.add_patches({"proj.weight": (delta,)})
    out = _applied_output(patcher)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert "proj" in memory.plan_for(patcher).streamed
    assert patcher.lowvram_patch_counter() == 1
    # the base tensors are untouched afterwards
    torch.testing.assert_close(base(X), _net()(X), rtol=0, atol=0)


def test_novram_streams_every_streamable_module():
    memory, counter = _manager("novram")
    patcher = memory.track(ModelPatcher(_net()))
    _applied_output(patcher)
    plan = memory.plan_for(patcher)
    assert plan.resident == ("",)
    assert set(plan.streamed) == {"conv_in", "norm", "conv", "to_q", "proj", "conv_out"}
    assert memory.streamers[id(patcher.model)].stats.forwards == 6


def test_normal_loads_whole_when_it_fits_and_in_part_when_it_does_not():
    memory, _ = _manager("normalvram", budget=10 ** 9)
    patcher = memory.track(ModelPatcher(_net()))
    _applied_output(patcher)
    assert memory.plan_for(patcher) is None
    small, _ = _manager("normalvram", budget=patcher.model_size() // 3)
    other = small.track(ModelPatcher(_net()))
    _applied_output(other)
    assert small.plan_for(other) is not None  # ComfyUI's automatic lowvram


def test_free_memory_probe_limits_the_room():
    memory, _ = _manager("normalvram", budget=10 ** 9, free_memory=lambda device: 1000, reserve_bytes=0)
    patcher = memory.track(ModelPatcher(_net()))
    _applied_output(patcher)
    assert memory.plan_for(patcher).resident_bytes < 1000


def test_highvram_and_gpu_only_always_load_whole():
    for mode in ("highvram", "gpu_only"):
        memory, counter = _manager(mode, budget=10)
        patcher = memory.track(ModelPatcher(_net()))
        _applied_output(patcher)
        assert memory.plan_for(patcher) is None and counter.copies == 0


def test_gpu_only_keeps_everything_on_the_compute_device():
    memory, _ = _manager("gpu_only", budget=10)
    assert memory.offload_device == memory.device
    a, b = (memory.track(ModelPatcher(_net())) for _ in range(2))
    _applied_output(a)
    _applied_output(b)
    assert memory.loaded_models() == [a, b]  # nothing offloaded, though over budget


def test_text_encoders_compute_on_the_cpu_in_lowvram_and_novram():
    for mode, on_cpu in (("lowvram", True), ("novram", True), ("normalvram", False)):
        memory = MemoryManager(device="meta", offload_device="cpu", budget_bytes=10, mode=mode)
        clip = memory.track(ClipPatcher(nn.Linear(2, 2)))
        unet = memory.track(ModelPatcher(nn.Linear(2, 2)))
        assert clip.load_device == (torch.device("cpu") if on_cpu else torch.device("meta"))
        assert unet.load_device == torch.device("meta")


def test_offloading_a_partially_loaded_model_moves_every_module():
    memory, _ = _manager("novram")
    patcher = memory.track(ModelPatcher(_net()))
    _applied_output(patcher)
    assert memory.offload(patcher) > 0
    assert memory.plan_for(patcher) is None and memory.loaded_models() == []


def test_out_of_memory_falls_back_to_a_lower_mode_and_reset_restores_it():
    memory, counter = _manager("normalvram")
    patcher = memory.track(ModelPatcher(_net()))
    expected = _net()(X)
    calls = []

    def flaky() -> torch.Tensor:
        calls.append(memory.mode)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return _applied_output(patcher)

    out = memory.retry_on_oom(flaky)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert calls == [VramMode.NORMAL, VramMode.NO]
    assert memory.plan_for(patcher) is not None and counter.copies > 0  # the retry streamed
    memory.reset_mode()
    assert memory.mode is VramMode.NORMAL
    assert memory.recover(torch.OutOfMemoryError("out of memory")) is True
    assert memory.mode is VramMode.NO
    assert memory.recover(ValueError("no")) is False


def test_from_flags_builds_the_mode_and_reserve():
    memory = MemoryManager.from_flags(cpu_only=True, lowvram=True)
    assert memory.mode is VramMode.DISABLED and memory.device == torch.device("cpu")
    memory = MemoryManager.from_flags(device="meta", lowvram=True, reserve_vram_gb=1.0)
    assert memory.mode is VramMode.LOW
    assert memory.reserve_bytes == int(0.8 * 1024 ** 3) + 1024 ** 3


def test_real_tiny_sd1_samples_the_same_streamed_with_a_lora_and_text_encoders_on_the_cpu(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from comfy_core.sampling.ksampler import sample

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt)
    cond = [[clip.encode_from_tokens(clip.tokenize("a cat")), {}]]
    uncond = [[clip.encode_from_tokens(clip.tokenize("")), {}]]
    name, weight = next((n, p) for n, p in model.model.named_parameters() if n.endswith("attn2.to_q.weight"))
    lora = model.clone()
    lora.add_patches({name: (torch.randn(weight.shape, generator=torch.Generator().manual_seed(2)) * 0.2,)})
    latent = torch.zeros(1, 4, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(3))

    def run(patcher):
        return sample(patcher, noise, 2, 5.0, "euler", "normal", cond, uncond, latent, seed=3, last_step=1)

    expected = run(lora)
    memory, counter = _manager("novram")
    streamed = memory.track(lora.clone())
    # The tiny random UNet's outputs reach ~200 at cfg 5; copied weights sit at other alignments, where
    # oneDNN may pick another blocking (single-threaded it does) and round the last bits differently.
    # The LoRA moves the output by ~200, so a tolerance of 5e-5 of the output's scale still tells.
    torch.testing.assert_close(run(streamed), expected, rtol=1e-5, atol=5e-5 * float(expected.abs().max()))
    plan = memory.plan_for(streamed)
    assert plan is not None and len(plan.streamed) > 10 and counter.copies > 0
    assert streamed.lowvram_patch_counter() == 1
    assert memory.track(clip.patcher.clone()).load_device == torch.device("cpu")


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.cuda
@requires_cuda
def test_streaming_on_a_real_gpu_from_pinned_memory():
    expected = _net()(X)
    memory = MemoryManager(device="cuda", mode="novram", partial_floor=0)
    assert memory.pin_memory
    patcher = memory.track(ModelPatcher(_net()))
    with torch.no_grad(), patcher.applied() as module:
        out = module(X.cuda())
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)
    net = patcher.model
    assert net.pos.device.type == "cuda"  # resident
    assert net.conv.weight.device.type == "cpu" and net.conv.weight.is_pinned()  # streamed, pinned
    assert patcher.loaded_size() == memory.plan_for(patcher).resident_bytes
    memory.free_all()
    assert all(p.device.type == "cpu" for p in net.parameters())


@pytest.mark.cuda
@requires_cuda
def test_lowvram_sampling_on_a_real_gpu_matches_the_full_load(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from comfy_core.sampling.ksampler import sample

    results = {}
    for mode in ("highvram", "novram"):
        memory = MemoryManager(device="cuda", mode=mode, partial_floor=0)
        model, clip, _ = load_checkpoint(tiny_sd1_ckpt)
        model, clip = memory.track(model), memory.track(clip.patcher) and clip
        cond = [[clip.encode_from_tokens(clip.tokenize("a cat")), {}]]
        uncond = [[clip.encode_from_tokens(clip.tokenize("")), {}]]
        noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(3))
        results[mode] = sample(model, noise, 2, 5.0, "euler", "normal", cond, uncond, torch.zeros(1, 4, 8, 8),
                               seed=3).cpu()
        assert (memory.plan_for(model) is not None) == (mode == "novram")
    torch.testing.assert_close(results["novram"], results["highvram"], rtol=1e-3, atol=1e-3)
