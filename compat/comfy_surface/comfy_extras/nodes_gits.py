"""ComfyUI's `comfy_extras.nodes_gits`: the GITSScheduler node's facade plus `NOISE_LEVELS`
(coefficient 0.80 ... 1.50 -> the schedules for 2 ... 20 steps) and `loglinear_interp`, the table
and function the scheduler runs on (comfy_core.sampling.schedule_tables,
comfy_core.sampling.sigma_schedules)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {
    "loglinear_interp": "comfy_core.sampling.sigma_schedules:loglinear_interp",
    "NOISE_LEVELS": "comfy_core.sampling.schedule_tables:GITS_NOISE_LEVELS",
})
