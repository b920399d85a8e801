"""ComfyUI's `folder_paths`, for node packs (implementation: compat/folders.py)."""
from compat.folders import (FolderNamesAndPaths, UnknownFolderError, UnsafePathError, add_model_folder_path,
                            annotated_filepath, exists_annotated_filepath, filter_files_extensions,
                            get_annotated_filepath, get_directory_by_type, get_filename_list, get_folder_paths,
                            get_full_path, get_full_path_or_raise, get_input_directory, get_output_directory,
                            get_save_image_path, get_temp_directory, get_user_directory, module_attribute)
from compat.folders import SUPPORTED_PT_EXTENSIONS as _EXTS

supported_pt_extensions = set(_EXTS)
folder_names_and_paths = FolderNamesAndPaths()


def __getattr__(name):  # models_dir, base_path, output_directory, ...: the running server's
    return module_attribute(name)
