"""ComfyUI's `comfy.options`: whether `comfy.cli_args` parses the command line when imported.

ComfyUI's main.py calls `enable_args_parsing()` before importing `comfy.cli_args`; a script that
uses ComfyUI as a library leaves it off and gets the defaults. Here the host parses ComfyUI's
flags itself (web/flags.py) and `comfy.cli_args.args` reflects the server's flags whatever this
says; the flag is kept so packs that set or read it keep working.
"""
args_parsing = False


def enable_args_parsing(enable: bool = True) -> None:
    global args_parsing
    args_parsing = enable
