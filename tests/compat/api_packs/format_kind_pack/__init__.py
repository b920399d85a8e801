"""A fixture pack that declares its own folder kind the way ComfyUI-VideoHelperSuite
(videohelpersuite/nodes.py) and ComfyUI-AnimateDiff-Evolved (animatediff/utils_model.py) do:

- at import, a kind with no folder yet, only if nobody declared it:
  `folder_names_and_paths["<kind>"] = ((), {".json"})`;
- the kind's extension set read back and added to in place
  (`folder_names_and_paths[kind][1].add(ext)`), which later listings must honour;
- its files listed with `folder_paths.get_filename_list(kind)` (empty until a folder is added,
  e.g. by `extra_model_paths.yaml` or `add_model_folder_path`).
"""
import folder_paths

KIND = "fixture_video_formats"

if KIND not in folder_paths.folder_names_and_paths:
    folder_paths.folder_names_and_paths[KIND] = ((), {".json"})
if len(folder_paths.folder_names_and_paths[KIND][1]) == 0:
    folder_paths.folder_names_and_paths[KIND][1].add(".json")


def add_extension(kind, extension):
    """AnimateDiff-Evolved's way to widen a kind: mutate the set ComfyUI holds."""
    folder_paths.folder_names_and_paths[kind][1].add(extension)


class ListFormats:
    CATEGORY = "fixture"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"format": (["default"] + folder_paths.get_filename_list(KIND),)}}

    def run(self, format):
        return (format,)


NODE_CLASS_MAPPINGS = {"FixtureListFormats": ListFormats}
