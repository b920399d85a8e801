"""The editor's per-user storage: settings, saved workflows and other user files, and `/i18n`.

Routes (ComfyUI's `app/user_manager.py`, `app/app_settings.py` and `/i18n`, written here from
their documented behaviour), each registered bare and under `/api`:

    GET  /users                          {"storage": "server", "migrated": bool}
    POST /users                          400: this server has one user (--multi-user: ComfyUI's
                                         {"username"} -> the new user id, in users.json)
    GET  /settings                       every setting (server defaults under the stored ones)
    POST /settings                       merge a JSON object into the stored settings
    GET  /settings/{id}                  one value, or null
    POST /settings/{id}                  body = the JSON value
    GET  /userdata?dir=&recurse=&full_info=&split=      list files under `dir`
    GET  /v2/userdata?path=              list files and folders under `path` (default: root)
    GET  /userdata/{file}                the file, as a download (never rendered inline)
    POST /userdata/{file}?overwrite=&full_info=         write the raw body; 409 if it exists
    DELETE /userdata/{file}              204
    POST /userdata/{file}/move/{dest}?overwrite=&full_info=
    GET  /i18n                           packs' `locales/<lang>/*.json`, merged

Single-user, like ComfyUI without `--multi-user`: everything lives in `<user_dir>/default/`.
With `--users` (web/auth/) each logged-in user has `<user_dir>/<name>/` instead.
Every client-supplied path goes through `web.confined_path`, so `..`, absolute paths,
backslashes and symlinks leading out of the user folder are refused with 403. Errors are JSON:
`{"error": {"type", "message", "details"}}`.
"""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

from aiohttp import web

from web.auth.access import current_user
from web.confined_path import PathOutsideRoot, confined_path
from web.frontend import editor_default_settings

log = logging.getLogger(__name__)

DEFAULT_USER = "default"
SETTINGS_FILE = "comfy.settings.json"
COMFY_USERS_FILE = "users.json"  # --multi-user: {user id: name}, as ComfyUI's
# Extra translation files merged under their own key (ComfyUI's EXTRA_LOCALE_FILES).
LOCALE_EXTRA_FILES = ("nodeDefs", "commands", "settings")
# Folders the editor lists at start-up (saved workflows, saved subgraphs).
EDITOR_FOLDERS = ("workflows", "subgraphs")


class UserDataError(Exception):
    """A user-data request that cannot be served; carries its HTTP status and error type."""

    def __init__(self, status: int, type_: str, message: str, details: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.details = details

    def response(self) -> web.Response:
        body = {"error": {"type": self.type, "message": self.message, "details": self.details}}
        return web.json_response(body, status=self.status)


def _file_info(path: Path, relative_to: Path) -> dict:
    """ComfyUI's `FileInfo`: relative path with '/', size, and times in ms since the epoch."""
    stat = path.stat()
    return {
        "path": path.relative_to(relative_to).as_posix(),
        "size": stat.st_size,
        "modified": int(stat.st_mtime * 1000),
        "created": int(stat.st_ctime * 1000),
    }


def _atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder and rename, so a crash or a
    concurrent reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UserFiles:
    """One user's file store, rooted at `root`; every name is confined to it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        try:
            return confined_path(self.root, relative, what="userdata")
        except PathOutsideRoot as exc:
            raise UserDataError(403, "invalid_path", str(exc), exc.reason) from None

    def existing_file(self, relative: str) -> Path:
        path = self.path(relative)
        if not path.is_file():
            raise UserDataError(404, "not_found", f"userdata: no file {relative!r}")
        return path

    def list_dir(self, directory: str, *, recurse: bool, full_info: bool, split: bool) -> list:
        """Files under `directory` (ComfyUI's `GET /userdata` shapes: paths relative to it,
        `[path, *segments]` with `split`, or `FileInfo` dicts with `full_info`)."""
        base = self.path(directory)
        if not base.is_dir():
            raise UserDataError(404, "not_found", f"userdata: no folder {directory!r}")
        found = base.rglob("*") if recurse else base.glob("*")
        results: list = []
        for path in sorted(found):
            if not path.is_file() or not self._inside(path):
                continue
            if any(part.startswith(".") for part in path.relative_to(base).parts):
                continue  # ComfyUI lists with glob, which skips hidden names (and our temp files)
            if full_info:
                results.append(_file_info(path, base))
                continue
            rel = path.relative_to(base).as_posix()
            results.append([rel, *rel.split("/")] if split else rel)
        return results

    def list_v2(self, relative: str) -> list[dict]:
        """Files and folders under `relative` (recursively), paths relative to the user root,
        folders first then by name (ComfyUI's `GET /v2/userdata`)."""
        base = self.path(relative) if relative else self.root.resolve()
        if not base.exists():
            if not relative:
                return []
            raise UserDataError(404, "not_found", f"userdata: no folder {relative!r}")
        if not base.is_dir():
            raise UserDataError(400, "not_a_directory", f"userdata: {relative!r} is not a folder")
        root = self.root.resolve()
        results = []
        for path in sorted(base.rglob("*")):
            if not self._inside(path):
                continue
            entry: dict[str, Any] = {"name": path.name, "path": path.relative_to(root).as_posix()}
            if path.is_dir():
                entry["type"] = "directory"
            else:
                stat = path.stat()
                entry.update(type="file", size=stat.st_size, modified=stat.st_mtime)
            results.append(entry)
        results.sort(key=lambda e: (e["type"] != "directory", e["name"].lower()))
        return results

    def write(self, relative: str, data: bytes, *, overwrite: bool) -> Path:
        path = self.path(relative)
        if path.is_dir():
            raise UserDataError(400, "is_a_directory", f"userdata: {relative!r} is a folder")
        if path.exists() and not overwrite:
            raise UserDataError(409, "file_exists", f"userdata: {relative!r} already exists")
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)
        return path

    def delete(self, relative: str) -> None:
        self.existing_file(relative).unlink()

    def move(self, source: str, dest: str, *, overwrite: bool) -> Path:
        src = self.existing_file(source)
        dst = self.path(dest)
        if dst.is_dir():
            raise UserDataError(400, "is_a_directory", f"userdata: {dest!r} is a folder")
        if dst.exists() and not overwrite:
            raise UserDataError(409, "file_exists", f"userdata: {dest!r} already exists")
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        return dst

    def info(self, path: Path, full_info: bool) -> Any:
        """What POST and move answer: the path relative to the user root, or its FileInfo."""
        root = self.root.resolve()
        return _file_info(path, root) if full_info else path.relative_to(root).as_posix()

    def _inside(self, path: Path) -> bool:
        # Listing follows what is in the folder; a symlink pointing outside is left out.
        return path.resolve().is_relative_to(self.root.resolve())


class SettingsStore:
    """The editor's settings in one JSON file; `defaults` apply where nothing is stored.

    A file that is not a JSON object is moved aside (`<name>.corrupt-<time>`) with an error in
    the log rather than overwritten, so nothing the user had is lost and the editor still starts.
    """

    def __init__(self, path: Path, defaults: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.defaults = dict(defaults or {})

    def stored(self) -> dict:
        if not self.path.is_file():
            return {}
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(value, dict):
                return value
            problem = f"holds a {type(value).__name__}, not an object"
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem = f"is not valid JSON ({exc})"
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        os.replace(self.path, aside)
        log.error("settings file %s %s; moved it to %s and started from defaults", self.path, problem, aside)
        return {}

    def all(self) -> dict:
        return {**self.defaults, **self.stored()}

    def get(self, setting_id: str) -> Any:
        return self.all().get(setting_id)

    def update(self, values: Mapping[str, Any]) -> None:
        self._save({**self.stored(), **values})

    def set(self, setting_id: str, value: Any) -> None:
        self._save({**self.stored(), setting_id: value})

    def replace(self, values: Mapping[str, Any]) -> None:
        """Store exactly `values` (ComfyUI's `AppSettings.save_settings`)."""
        self._save(dict(values))

    def _save(self, settings: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.path, json.dumps(settings, indent=4).encode("utf-8"))


def merge_translations(pack_dirs: Iterable[Path]) -> dict:
    """Packs' translations as the editor's `/i18n` expects: `{lang: {...main.json,
    "nodeDefs": ..., "commands": ..., "settings": ...}}`, merged recursively, later packs
    winning. A locale file that is not a JSON object is logged and skipped (it is a pack's
    file, not client input, and one bad pack must not break the editor for the others)."""
    merged: dict = {}
    for pack_dir in pack_dirs:
        locales = Path(pack_dir) / "locales"
        if not locales.is_dir():
            continue
        for lang_dir in sorted(p for p in locales.iterdir() if p.is_dir()):
            strings = _read_locale_file(lang_dir / "main.json")
            for key in LOCALE_EXTRA_FILES:
                extra = _read_locale_file(lang_dir / f"{key}.json")
                if extra:
                    strings[key] = extra
            if strings:
                merged[lang_dir.name] = _merge_recursive(merged.get(lang_dir.name, {}), strings)
    return merged


def _read_locale_file(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.error("translation file %s is not valid JSON (%s); skipped", path, exc)
        return {}
    if not isinstance(value, dict):
        log.error("translation file %s is not a JSON object; skipped", path)
        return {}
    return value


def _merge_recursive(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_recursive(out[key], value)
        else:
            out[key] = value
    return out


def _write_json_atomic(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".users-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(value, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _query_flag(request: web.Request, name: str, default: bool) -> bool:
    """ComfyUI's reading of boolean query flags: `overwrite` is true unless "false";
    `recurse`, `full_info`, `split` are true only for "true"."""
    value = request.query.get(name)
    if value is None:
        return default
    return value.lower() != "false" if default else value.lower() == "true"


async def _json_body(request: web.Request, what: str) -> Any:
    try:
        return json.loads(await request.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserDataError(400, "invalid_json", f"{what}: the body is not valid JSON", str(exc)) from None


class UserDataRoutes:
    """The handlers, bound to one user folder, settings defaults and pack list."""

    def __init__(self, user_dir: Path, *, default_settings: Mapping[str, Any] | None = None,
                 pack_dirs: Iterable[Path] = (), multi_user: bool = False) -> None:
        self.user_dir = Path(user_dir)
        # --multi-user (ComfyUI's, not authentication): the `Comfy-User` header names a user id
        # from `<user_dir>/users.json` (made by POST /users) whose folder is `<user_dir>/<id>/`.
        self.multi_user = multi_user
        self.comfy_users: dict[str, str] = self._read_comfy_users() if multi_user else {}
        self.default_settings = default_settings
        self.files = UserFiles(self.user_dir / DEFAULT_USER)
        self.settings = SettingsStore(self.files.root / SETTINGS_FILE, default_settings)
        self.pack_dirs = [Path(p) for p in pack_dirs]
        # --users (web/auth/): each user's own folder `<user_dir>/<name>/`, made on first use
        self._per_user: dict[str, tuple[UserFiles, SettingsStore]] = {}

    def _storage(self, request: web.Request) -> tuple["UserFiles", "SettingsStore"]:
        """(files, settings) of the caller: the logged-in user's with --users, else `default/`."""
        user = current_user(request)
        if user is not None:
            folder_name = user.name  # --users: the header below is ignored
        elif self.multi_user and request.headers.get("Comfy-User", DEFAULT_USER) != DEFAULT_USER:
            folder_name = request.headers["Comfy-User"]
            if folder_name not in self.comfy_users:
                raise UserDataError(400, "unknown_user", f"unknown user {folder_name[:80]!r}",
                                    "the Comfy-User header must name a user made by POST /users")
        else:
            return self.files, self.settings
        if folder_name not in self._per_user:
            files = UserFiles(self.user_dir / folder_name)
            for folder in EDITOR_FOLDERS:
                (files.root / folder).mkdir(parents=True, exist_ok=True)
            self._per_user[folder_name] = (files, SettingsStore(files.root / SETTINGS_FILE, self.default_settings))
        return self._per_user[folder_name]

    def _read_comfy_users(self) -> dict[str, str]:
        path = self.user_dir / COMFY_USERS_FILE
        if not path.is_file():
            return {}
        try:
            users = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            log.error("%s is not valid JSON (%s); no --multi-user users", path, exc)
            return {}
        return {str(k): str(v) for k, v in users.items()} if isinstance(users, dict) else {}

    def files_for(self, request: web.Request) -> "UserFiles":
        return self._storage(request)[0]

    def user_root(self, request: web.Request) -> Path | None:
        """The caller's user folder, or None for a `Comfy-User` no POST /users made (packs'
        `user_manager.get_request_user_filepath`)."""
        try:
            return self._storage(request)[0].root
        except UserDataError:
            return None

    def settings_for(self, request: web.Request) -> "SettingsStore":
        return self._storage(request)[1]

    def route_table(self) -> list[tuple[str, str, Any]]:
        return [
            ("GET", "/users", self.get_users),
            ("POST", "/users", self.post_users),
            ("GET", "/settings", self.get_settings),
            ("POST", "/settings", self.post_settings),
            ("GET", "/settings/{id}", self.get_setting),
            ("POST", "/settings/{id}", self.post_setting),
            ("GET", "/userdata", self.list_userdata),
            ("GET", "/v2/userdata", self.list_userdata_v2),
            ("GET", "/userdata/{file}", self.get_userdata),
            ("POST", "/userdata/{file}", self.post_userdata),
            ("DELETE", "/userdata/{file}", self.delete_userdata),
            ("POST", "/userdata/{file}/move/{dest}", self.move_userdata),
            ("GET", "/i18n", self.get_i18n),
        ]

    async def get_users(self, request: web.Request) -> web.Response:
        if self.multi_user and current_user(request) is None:  # ComfyUI's answer with --multi-user
            return web.json_response({"storage": "server", "users": self.comfy_users})
        # "migrated" tells the editor that settings already live on the server.
        return web.json_response({"storage": "server", "migrated": self.files_for(request).root.is_dir()})

    async def post_users(self, request: web.Request) -> web.Response:
        if not self.multi_user or current_user(request) is not None:
            raise UserDataError(400, "single_user", "this server has one user; adding users is not supported")
        body = await _json_body(request, "POST /users")
        name = body.get("username") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise UserDataError(400, "invalid_username", "POST /users: 'username' must be a non-empty string")
        name = name.strip()
        if name in self.comfy_users.values():
            raise UserDataError(400, "duplicate_username", "Duplicate username.")
        # ComfyUI's id: the name with other characters as '-', then '_' and a UUID
        user_id = f"{re.sub(r'[^a-zA-Z0-9_-]+', '-', name)}_{uuid.uuid4()}"
        self.comfy_users[user_id] = name
        _write_json_atomic(self.user_dir / COMFY_USERS_FILE, self.comfy_users)
        return web.json_response(user_id)

    async def get_settings(self, request: web.Request) -> web.Response:
        return web.json_response(self.settings_for(request).all())

    async def post_settings(self, request: web.Request) -> web.Response:
        values = await _json_body(request, "POST /settings")
        if not isinstance(values, dict):
            raise UserDataError(400, "invalid_settings", "POST /settings: expected a JSON object of settings",
                                f"received {type(values).__name__}")
        self.settings_for(request).update(values)
        return web.json_response({})

    async def get_setting(self, request: web.Request) -> web.Response:
        return web.json_response(self.settings_for(request).get(request.match_info["id"]))

    async def post_setting(self, request: web.Request) -> web.Response:
        value = await _json_body(request, f"POST /settings/{request.match_info['id']}")
        self.settings_for(request).set(request.match_info["id"], value)
        return web.json_response({})

    async def list_userdata(self, request: web.Request) -> web.Response:
        directory = request.query.get("dir", "")
        if not directory:
            raise UserDataError(400, "missing_dir", "GET /userdata: the 'dir' query parameter is required")
        return web.json_response(self.files_for(request).list_dir(
            directory,
            recurse=_query_flag(request, "recurse", False),
            full_info=_query_flag(request, "full_info", False),
            split=_query_flag(request, "split", False)))

    async def list_userdata_v2(self, request: web.Request) -> web.Response:
        return web.json_response(self.files_for(request).list_v2(request.query.get("path", "")))

    async def get_userdata(self, request: web.Request) -> web.StreamResponse:
        files = self.files_for(request)
        path = files.existing_file(request.match_info["file"])
        # User files are arbitrary content: never let the browser render them in our origin
        # (ComfyUI's stored-XSS fix, CVE-2026-56672). Only the root user.css is styling.
        if path == files.root.resolve() / "user.css":
            headers = {"Content-Type": "text/css", "Content-Disposition": "inline"}
        elif path.suffix.lower() == ".json":
            headers = {"Content-Type": "application/json", "Content-Disposition": "attachment"}
        else:
            headers = {"Content-Type": "application/octet-stream", "Content-Disposition": "attachment"}
        headers["X-Content-Type-Options"] = "nosniff"
        return web.FileResponse(path, headers=headers)

    async def post_userdata(self, request: web.Request) -> web.Response:
        relative = request.match_info["file"]
        files = self.files_for(request)
        files.path(relative)  # refuse a bad name before reading the body
        data = await request.read()
        path = files.write(relative, data, overwrite=_query_flag(request, "overwrite", True))
        return web.json_response(files.info(path, _query_flag(request, "full_info", False)))

    async def delete_userdata(self, request: web.Request) -> web.Response:
        self.files_for(request).delete(request.match_info["file"])
        return web.Response(status=204)

    async def move_userdata(self, request: web.Request) -> web.Response:
        files = self.files_for(request)
        path = files.move(request.match_info["file"], request.match_info["dest"],
                          overwrite=_query_flag(request, "overwrite", True))
        return web.json_response(files.info(path, _query_flag(request, "full_info", False)))

    async def get_i18n(self, request: web.Request) -> web.Response:
        return web.json_response(merge_translations(self.pack_dirs))


def _with_errors(handler):
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except UserDataError as exc:
            return exc.response()
    wrapped.__name__ = getattr(handler, "__name__", "handler")
    return wrapped


def register(app: web.Application, routes: UserDataRoutes) -> None:
    """Register `routes` on `app`, bare and under `/api` (ComfyUI serves both)."""
    for method, path, handler in routes.route_table():
        for prefix in ("", "/api"):
            app.router.add_route(method, prefix + path, _with_errors(handler))


def pack_directories(packs: Iterable[Any]) -> list[Path]:
    """The folders of loaded packs (`graph.packs.PackResult.path`; single-file packs have
    no locales folder and are skipped by `merge_translations`)."""
    return [Path(p.path) for p in packs if getattr(p, "ok", True) and getattr(p, "path", None)]


def add_userdata_routes(app: web.Application, state: Any, *,
                        default_settings: Mapping[str, Any] | None = None) -> UserDataRoutes:
    """Add the editor's user routes for the server `state` (`web.state.AppState`: reads
    `state.env.user_dir` and `state.packs`). `default_settings` defaults to the editor's
    (`web.frontend.editor_default_settings()`)."""
    if default_settings is None:
        default_settings = editor_default_settings()
    routes = UserDataRoutes(state.env.user_dir, default_settings=default_settings,
                            pack_dirs=pack_directories(getattr(state, "packs", ()) or ()),
                            multi_user=getattr(getattr(state, "config", None), "multi_user", False))
    # The editor lists these two folders at every start-up; a missing one answers 404 (as in
    # ComfyUI), which the editor tolerates but logs as an error in the browser console.
    for folder in EDITOR_FOLDERS:
        (routes.files.root / folder).mkdir(parents=True, exist_ok=True)
    register(app, routes)
    return routes
