"""What route handlers ask about the caller in the users mode (`--users`), and the marks a
handler carries for the auth middleware (web/auth/middleware.py). With users off every answer is
the single-user one: the owner is "default" and everything may be seen.

Marks (attributes on the handler function; the middleware reads them from the matched route, so
no route list exists anywhere):
  @public      served without credentials (only the login page and the login POST)
  @admin_only  admins only (queue pause / resume / priorities, user management)
  @any_role    a viewer (read-only) may call it although it is not GET (logout, own tokens)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from aiohttp import web

from web.queue_item import DEFAULT_OWNER

if TYPE_CHECKING:
    from web.auth.service import AuthService
    from web.auth.store import User

USER_KEY: "web.RequestKey[User]" = web.RequestKey("comfy_engine_user", object)  # type: ignore[assignment]
# request[USER_KEY]: the User the middleware resolved (users mode)
F = TypeVar("F", bound=Callable[..., Any])


def public(handler: F) -> F:
    handler.auth_public = True  # type: ignore[attr-defined]
    return handler


def admin_only(handler: F) -> F:
    handler.auth_admin_only = True  # type: ignore[attr-defined]
    return handler


def any_role(handler: F) -> F:
    handler.auth_any_role = True  # type: ignore[attr-defined]
    return handler


def auth_of(request: web.Request) -> "AuthService | None":
    from web.state import STATE_KEY

    return getattr(request.app[STATE_KEY], "auth", None)


def current_user(request: web.Request) -> "User | None":
    """The logged-in user, or None (users off)."""
    return request.get(USER_KEY)


def owner_of(request: web.Request) -> str:
    """Who a prompt submitted by this request belongs to."""
    user = current_user(request)
    return user.name if user is not None else DEFAULT_OWNER


def may_see(request: web.Request, owner: str) -> bool:
    """May the caller see / change what `owner` owns (a prompt, a job, a history entry)?"""
    user = current_user(request)
    return user is None or user.is_admin or user.name == owner


def sees_all(request: web.Request) -> bool:
    user = current_user(request)
    return user is None or user.is_admin


def may_read_file(request: web.Request, kind: str, subfolder: str, filename: str) -> bool:
    user, auth = current_user(request), auth_of(request)
    if user is None or auth is None:
        return True
    return auth.may_read_file(user, kind, subfolder, filename)


def forbidden(message: str) -> web.Response:
    return web.json_response({"error": {"type": "forbidden", "message": message}}, status=403)


def _file_key(request: web.Request, path: Any) -> tuple[str, str, str] | None:
    """(type, subfolder, filename) of a file under the output, input or temp folder, else None."""
    from pathlib import Path

    from web.state import STATE_KEY

    if path is None:
        return None
    env = request.app[STATE_KEY].env
    path = Path(path).resolve()
    for kind, root in (("output", env.output_dir), ("input", env.input_dir), ("temp", env.temp_dir)):
        try:
            relative = path.relative_to(Path(root).resolve())
        except ValueError:
            continue
        return kind, relative.parent.as_posix() if relative.parent.as_posix() != "." else "", relative.name
    return None


def may_read_path(request: web.Request, path: Any, record_key: str | None = None, *,
                  shared_outside: bool = False) -> bool:
    """May the caller read this stored file (an asset's bytes)? `record_key`: an asset id whose
    recorded owners may read it whatever its path. `shared_outside`: a file outside the output,
    input and temp folders (a model in the assets catalogue) is everyone's."""
    user, auth = current_user(request), auth_of(request)
    if user is None or auth is None or user.is_admin:
        return True
    if record_key is not None and user.name in auth.store.file_owners("asset", "", record_key):
        return True
    key = _file_key(request, path)
    if key is None:
        return shared_outside and path is not None
    return auth.may_read_file(user, *key)


def record_owner(request: web.Request, path: Any, record_key: str | None = None) -> None:
    """The caller (users mode) owns this stored file, and the asset id `record_key`."""
    user, auth = current_user(request), auth_of(request)
    if user is None or auth is None:
        return
    rows = [("asset", "", record_key, user.name)] if record_key else []
    key = _file_key(request, path)
    if key is not None:
        rows.append((*key, user.name))
    auth.store.record_files(rows)
