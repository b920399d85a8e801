# Runs before any pack is imported; ComfyUI's import surface is already available.
import os

import folder_paths

with open(os.path.join(folder_paths.get_output_directory(), "prestartup_ran.txt"), "w") as handle:
    handle.write(folder_paths.models_dir)
