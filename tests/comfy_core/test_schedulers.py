"""Schedulers: ComfyUI's names, order and values (reference values from ComfyUI itself)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.schedulers import SCHEDULER_NAMES, UnknownSchedulerError, calculate_sigmas

# shared/reference/samplers.md section 3: ComfyUI's functions run on CPU in float32.
REFERENCE_10 = {
    "simple": [14.614641189575195, 8.302803039550781, 5.08776330947876, 3.3210830688476562, 2.276463031768799, 1.6128861904144287, 1.1605783700942993, 0.8298595547676086, 0.5692849159240723, 0.3416738212108612, 0.0],
    "sgm_uniform": [14.614640235900879, 8.307170867919922, 5.092408180236816, 3.325068950653076, 2.2797305583953857, 1.6155803203582764, 1.1628645658493042, 0.8318837285041809, 0.5711888670921326, 0.34370481967926025, 0.0],
    "karras": [14.614643096923828, 9.10292911529541, 5.478392124176025, 3.168604850769043, 1.749418020248413, 0.9140726923942566, 0.4469183683395386, 0.2013983577489853, 0.08191029727458954, 0.0291671771556139, 0.0],
    "exponential": [14.614640235900879, 7.324869155883789, 3.6712303161621094, 1.8400236368179321, 0.922221302986145, 0.4622182846069336, 0.23166418075561523, 0.11611027270555496, 0.058194562792778015, 0.029167160391807556, 0.0],
    "ddim_uniform": [8.390685081481934, 5.134430885314941, 3.3477635383605957, 2.292853832244873, 1.6236920356750488, 1.1682159900665283, 0.8356528282165527, 0.57405024766922, 0.34618669748306274, 0.04131441190838814, 0.0],
    "beta": [14.614641189575195, 11.542770385742188, 7.371844291687012, 4.372801780700684, 2.6152358055114746, 1.6182788610458374, 1.0273293256759644, 0.6548853516578674, 0.3955096900463104, 0.1990586221218109, 0.0],
    "normal": [14.614640235900879, 7.839882850646973, 4.6091742515563965, 2.918307065963745, 1.9501614570617676, 1.3449277877807617, 0.9323579668998718, 0.6249769330024719, 0.3686577379703522, 0.029167160391807556, 0.0],
    "linear_quadratic": [14.614641189575195, 14.5415678024292, 14.46849536895752, 14.395421981811523, 14.322348594665527, 14.249275207519531, 13.620844841003418, 11.88170337677002, 9.031847953796387, 5.071280479431152, 0.0],
    "kl_optimal": [14.614632606506348, 4.2323503494262695, 2.393718957901001, 1.5970659255981445, 1.132996916770935, 0.8152444362640381, 0.572914183139801, 0.37248414754867554, 0.19528833031654358, 0.029167158529162407, 0.0],
}
REFERENCE_4 = {
    "simple": [14.614641189575195, 4.081729412078857, 1.6128861904144287, 0.6932048797607422, 0],
    "sgm_uniform": [14.614640235900879, 4.086081027984619, 1.6155803203582764, 0.6951495409011841, 0],
    "karras": [14.614643096923828, 3.168604850769043, 0.4469185769557953, 0.0291671771556139, 0],
    "exponential": [14.614640235900879, 1.8400236368179321, 0.23166418075561523, 0.029167160391807556, 0],
    "ddim_uniform": [4.116696357727051, 1.6236920356750488, 0.6983981132507324, 0.04131441190838814, 0],
    "beta": [14.614641189575195, 5.686591625213623, 1.6182788610458374, 0.5153906345367432, 0],
    "normal": [14.614640235900879, 2.918307065963745, 0.9323579668998718, 0.029167160391807556, 0],
    "linear_quadratic": [14.614641189575195, 14.431958198547363, 14.249275207519531, 10.59561538696289, 0],
    "kl_optimal": [14.614632606506348, 1.5970659255981445, 0.572914183139801, 0.029167158529162407, 0],
}


@pytest.fixture(scope="module")
def ms() -> ModelSampling:
    return ModelSampling()


def test_names_and_order_are_comfyuis() -> None:
    assert SCHEDULER_NAMES == ("simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta",
                               "normal", "linear_quadratic", "kl_optimal")


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
@pytest.mark.parametrize("steps,table", [(10, REFERENCE_10), (4, REFERENCE_4)])
def test_reference_values(ms: ModelSampling, name: str, steps: int, table: dict) -> None:
    got = calculate_sigmas(ms, name, steps)
    assert got.dtype == torch.float32
    # float32 results; a 1-ulp difference from the torch build ComfyUI was run with is allowed.
    torch.testing.assert_close(got, torch.tensor(table[name], dtype=torch.float32), rtol=3e-7, atol=0)


def test_ddim_uniform_and_beta_step_counts(ms: ModelSampling) -> None:
    assert len(calculate_sigmas(ms, "ddim_uniform", 7)) == 9  # 8 steps for n = 7
    assert calculate_sigmas(ms, "ddim_uniform", 1).tolist() == pytest.approx([0.04131441190838814, 0.0])
    assert len(calculate_sigmas(ms, "beta", 200)) - 1 == 199
    assert len(calculate_sigmas(ms, "beta", 500)) - 1 == 475


def test_edge_cases(ms: ModelSampling) -> None:
    assert calculate_sigmas(ms, "linear_quadratic", 1).tolist() == pytest.approx([14.614641189575195, 0.0])
    assert math.isnan(float(calculate_sigmas(ms, "kl_optimal", 1)[0]))  # ComfyUI's 0/0, kept
    for name in SCHEDULER_NAMES:
        s = calculate_sigmas(ms, name, 25)
        assert s[-1] == 0 and bool((s[:-1] > 0).all())
        assert bool((s[1:] <= s[:-1]).all()), name


def test_unknown_scheduler_raises(ms: ModelSampling) -> None:
    with pytest.raises(UnknownSchedulerError, match="'nope'.*simple"):
        calculate_sigmas(ms, "nope", 10)
    with pytest.raises(ValueError, match="steps"):
        calculate_sigmas(ms, "karras", 0)
