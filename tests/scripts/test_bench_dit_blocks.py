"""bench/dit_blocks.py at the test fixtures' tiny widths: its files load in every storage dtype,
the captured block inputs are the ones the forward gives the blocks, the extrapolation adds up,
and the whole script runs end to end (figures printed, temp files removed)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("dit_blocks", REPO / "bench" / "dit_blocks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dit_blocks", module)
    spec.loader.exec_module(module)
    return module


BLOCKS = {"flux": {"double": 1, "single": 1}, "sd35": {"joint": 2}}


@pytest.fixture(scope="module")
def files(bench, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dit")
    paths = {}
    for model, blocks in BLOCKS.items():
        paths[model] = folder / f"{model}.safetensors"
        bench.write_random_file(paths[model], bench.model_shapes(model, blocks, tiny=True))
    return paths


@pytest.mark.parametrize("model", ["flux", "sd35"])
def test_every_storage_loads_the_real_layout_and_casts_at_run_time(bench, files, model):
    sizes = {}
    for storage, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp8_e4m3fn", torch.float8_e4m3fn)):
        for loader in ("direct", "auto"):
            module, how = bench.load_module(model, files[model], storage, CPU, torch.float32, loader)
            assert {t.dtype for t in module.state_dict().values()} == {dtype}, (storage, loader)
            linears = {type(layer).__name__ for layer in module.modules() if isinstance(layer, torch.nn.Linear)}
            assert linears == ({"Linear"} if storage == "fp32" else {"CastLinear"}), (storage, loader)
            if loader == "direct":
                assert how.startswith("direct")
            sizes[storage] = bench.module_bytes(module)
    assert sizes["fp32"] == 2 * sizes["bf16"] == 4 * sizes["fp8_e4m3fn"]


@pytest.mark.parametrize("model", ["flux", "sd35"])
def test_captured_inputs_are_those_the_forward_gives_the_first_block(bench, files, model):
    module, _ = bench.load_module(model, files[model], "fp32", CPU, torch.float32, "direct")
    inputs = bench.model_inputs(model, module, 64, 7, CPU, torch.float32)
    captured = {}
    with torch.inference_mode():
        bench.capture_block_inputs(model, module, inputs, captured)
    kind, key, block = bench.block_list(model, module)[0]
    seen = {}

    def record(args, extra):
        out = extra["original_block"](args)
        seen.update(out)
        return out

    with torch.inference_mode():
        module(**inputs, transformer_options={"patches_replace": {"dit": {key: record}}})
        img_out = bench.block_call(model, kind, block, captured[key])()
    img_out = img_out[0] if model == "flux" else img_out[1]  # Flux (img, txt); MMDiT (context, x)
    torch.testing.assert_close(img_out, seen["img"], rtol=0, atol=0)
    hidden = module.hidden_size
    assert captured[key]["img"].shape == (1, (64 // 16) ** 2, hidden)
    assert captured[key]["txt"].shape == (1, 7, hidden)
    kinds = [k for k, _, _ in bench.block_list(model, module)]
    assert kinds == (["double", "single"] if model == "flux" else ["joint", "joint_pre_only"])
    if model == "flux":  # the single block sees the joint [txt, img] sequence, its RoPE cut to match
        single = captured[("single_block", 0)]
        assert single["img"].shape == (1, 7 + 16, hidden) and single["pe"].shape[2] == 7 + 16
        warm = bench.truncated(single, tokens=5)
        assert warm["img"].shape[1] == 5 and warm["pe"].shape[2] == 5


def test_extrapolation_adds_counts_times_block_medians_and_the_rest(bench):
    def block(kind, seconds, weights, transient):
        return {"kind": kind, "median_s": seconds, "weights_bytes": weights, "transient_bytes": transient}

    result = {"model": "flux", "device": "cpu", "base_rss": 100,
              "rest": {"median_s": 0.5, "weights_bytes": 40, "transient_bytes": 3},
              "blocks": [block("double", 2.0, 10, 7), block("double", 4.0, 10, 9), block("single", 1.0, 5, 11)]}
    full = bench.extrapolate(result)
    assert full["step_s"] == pytest.approx(0.5 + 19 * 3.0 + 38 * 1.0)
    assert full["weights_bytes"] == 40 + 19 * 10 + 38 * 5
    assert full["peak_bytes"] == 100 + full["weights_bytes"] + 11
    result["blocks"] = result["blocks"][:2]
    with pytest.raises(ValueError, match="no single block"):
        bench.extrapolate(result)


def test_measure_reports_each_run_and_non_finite_outputs(bench):
    calls = []
    timing = bench.measure(lambda: calls.append(1) or torch.ones(3), CPU, 3, warmup=lambda: calls.append(0))
    assert calls == [0, 1, 1, 1] and len(timing["seconds"]) == 3 and timing["finite"]
    assert timing["median_s"] == sorted(timing["seconds"])[1]
    assert not bench.measure(lambda: (torch.ones(2), torch.tensor([math.nan])), CPU, 1)["finite"]


def test_the_script_runs_end_to_end_and_removes_its_files(bench, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(bench.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "work"))
    results = bench.main(["--tiny", "--in-process", "--resolution", "64", "--runs", "2",
                          "--storage", "fp32,fp8_e4m3fn", "--text-tokens", "8"])
    out = capsys.readouterr().out
    assert [(r["model"], r["storage"]) for r in results] == [("flux", "fp32"), ("flux", "fp8_e4m3fn"),
                                                             ("sd35", "fp32"), ("sd35", "fp8_e4m3fn")]
    assert [len(r["blocks"][0]["seconds"]) for r in results] == [2, 1, 2, 1]  # --runs, then --storage-runs
    assert all(b["finite"] and b["tokens"] == 8 + 16 for r in results for b in r["blocks"])
    assert out.count("EXTRAPOLATED full depth") == 4 and "19 double + 38 single" in out
    assert out.count("= block peak") == 8 and "summary" in out
    assert "37 joint + 1 joint_pre_only" in out and "median of 2 run(s)" in out
    assert not (tmp_path / "work").exists()


def test_bad_flags_are_refused(bench):
    with pytest.raises(SystemExit, match="sd35-blocks"):
        bench.main(["--tiny", "--sd35-blocks", "1"])
    with pytest.raises(SystemExit, match="unknown --storage"):
        bench.main(["--tiny", "--storage", "int4"])
    with pytest.raises(SystemExit, match="multiple of 16"):
        bench.main(["--tiny", "--resolution", "100"])


@pytest.mark.parametrize("model", ["flux", "sd35"])
def test_the_whole_model_is_built_from_random_weights_and_timed_when_it_fits(bench, model):
    depth = BLOCKS[model] if model == "flux" else {"joint": 3}
    case = {"model": model, "device": "cpu", "dtype": "float32", "storage": "fp8_e4m3fn", "resolution": 64,
            "text_tokens": 4, "runs": 1, "tiny": True, "depth": depth}
    whole = bench.whole_model_case(case, free=2 ** 40)
    fp32_bytes = 4 * sum(math.prod(s) for s in bench.model_shapes(model, depth, tiny=True).values())
    assert whole["finite"] and whole["it_per_s"] > 0 and 4 * whole["weights_bytes"] == fp32_bytes
    assert "skipped" in bench.whole_model_case(case, free=2 ** 20)
    assert "CUDA only" in bench.whole_model_case(case)["skipped"]


def test_a_case_result_survives_the_trip_from_a_child_process(bench, files):
    """What a child prints (JSON) is what the parent formats: every figure serialisable."""
    case = {"model": "sd35", "path": str(files["sd35"]), "storage": "bf16", "device": "cpu", "dtype": "float32",
            "resolution": 32, "loader": "direct", "text_tokens": 4, "threads": None, "runs": 1, "tiny": True,
            "whole": False}
    result = bench.json.loads(bench.json.dumps(bench.child_main(case)))
    assert result["storage"] == "bf16" and result["base_rss"] > 0 and result["loaded_rss"] > 0
    assert [b["kind"] for b in result["blocks"]] == ["joint", "joint_pre_only"]
    assert "sd35 bf16 storage" in "\n".join(bench.format_case(result, 32))
