"""ComfyUI's `folder_paths`, for node packs (implementation: compat/folders.py). Its `__file__`
is `<base path>/folder_paths.py`, as ComfyUI's sits in the install root (`FolderPathsModule`)."""
import sys as _sys

from compat.folders import (CacheHelper, FolderNamesAndPaths, UnknownFolderError, UnsafePathError,
                            add_model_folder_path, annotated_filepath, cache_helper, cached_filename_list_,
                            exists_annotated_filepath, filename_list_cache, filter_files_content_types,
                            filter_files_extensions, get_annotated_filepath, get_directory_by_type,
                            get_filename_list, get_filename_list_, get_folder_paths, get_full_path,
                            get_full_path_or_raise, get_input_directory, get_input_subfolders,
                            get_output_directory, get_save_image_path, get_temp_directory, get_user_directory,
                            map_legacy, module_attribute, recursive_search, set_input_directory,
                            set_output_directory, set_temp_directory, set_user_directory)
from compat.folders import FolderPathsModule as _FolderPathsModule
from compat.folders import EXTENSION_CONTENT_TYPES as extension_mimetypes_cache
from compat.folders import SUPPORTED_PT_EXTENSIONS as _EXTS

supported_pt_extensions = set(_EXTS)
folder_names_and_paths = FolderNamesAndPaths()


def __getattr__(name):  # models_dir, base_path, output_directory, ...: the running server's
    return module_attribute(name)


_facade_names = {}  # a facade of no names of its own: ComfyUI's re-exports resolve (compat/facade.py)
_sys.modules[__name__].__class__ = _FolderPathsModule
