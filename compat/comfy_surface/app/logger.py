"""ComfyUI's `app.logger` for node packs (compat/app_logger.py): `get_logs()` is the served app's
recent log, the store GET /internal/logs answers from (web/routes_logs.py); `on_flush` registers a
function called with new entries; `setup_logger`, `LogInterceptor` and the start-up warning helpers
are ComfyUI's. Importable without torch."""
from compat.facade import facade

facade(__name__, {name: "compat.app_logger:" + name for name in (
    "LogInterceptor", "get_logs", "on_flush", "setup_logger", "log_startup_warning", "print_startup_warnings",
    "STARTUP_WARNINGS")})


def __getattr__(name: str):
    # ComfyUI's module globals `logs` (what get_logs() returns) and the two interceptors
    # (None: this server tees the console itself), answered when read.
    from compat.app_logger import module_global

    return module_global(__name__, name)
