"""ComfyUI's `comfy.k_diffusion.utils`: k-diffusion's helpers (compat/kdiffusion_utils.py), e.g.
`append_dims`, which samplers use, and `FolderOfImages`, which VideoHelperSuite imports."""
from compat.facade import facade

facade(__name__, {name: f"compat.kdiffusion_utils:{name}" for name in (
    "append_dims", "n_params", "download_file", "train_mode", "eval_mode", "ema_update", "EMAWarmup",
    "InverseLR", "ExponentialLR", "rand_log_normal", "rand_log_logistic", "rand_log_uniform", "rand_v_diffusion",
    "rand_split_log_normal", "tf32_mode", "CSVLogger", "hf_datasets_augs_helper", "FolderOfImages")})
