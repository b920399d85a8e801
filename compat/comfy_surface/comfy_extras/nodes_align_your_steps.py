"""ComfyUI's `comfy_extras.nodes_align_your_steps`: the AlignYourStepsScheduler node's facade plus
`loglinear_interp(t_steps, num_steps)` and `NOISE_LEVELS` ({"SD1", "SDXL", "SVD"}: the published
10-step schedules), the very function and table the scheduler runs on
(comfy_core.sampling.sigma_schedules, comfy_core.sampling.schedule_tables)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {
    "loglinear_interp": "comfy_core.sampling.sigma_schedules:loglinear_interp",
    "NOISE_LEVELS": "comfy_core.sampling.schedule_tables:AYS_NOISE_LEVELS",
})
