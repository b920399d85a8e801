"""`main.py users ...`: manage the users mode's accounts from a shell, on the database the server
uses (`<user directory>/comfy_engine_queue.sqlite3`). This is how the first admin is made:

    python main.py users add alice --role admin     # asks for the password twice
    COMFY_ENGINE_PASSWORD=... python main.py users add bot --role user   # no prompt (scripts, images)
    python main.py users list | passwd NAME | role NAME ROLE | remove NAME

`--base-directory` / `--user-directory` pick the folders as for the server. Works while the
server runs (SQLite WAL); a removed user's sessions and tokens stop working at once.
"""
from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Sequence, TextIO

from web.auth.store import ROLES, AuthError, UserStore

PASSWORD_ENV = "COMFY_ENGINE_PASSWORD"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="main.py users", description="users of the --users mode (docs/auth.md)")
    parser.add_argument("--base-directory", type=Path, default=None, metavar="DIR")
    parser.add_argument("--user-directory", type=Path, default=None, metavar="DIR")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="create a user (password from $COMFY_ENGINE_PASSWORD or asked)")
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="user")
    commands.add_parser("list", help="list users and roles")
    passwd = commands.add_parser("passwd", help="set a user's password (ends their sessions)")
    passwd.add_argument("name")
    role = commands.add_parser("role", help="change a user's role")
    role.add_argument("name")
    role.add_argument("role", choices=ROLES)
    remove = commands.add_parser("remove", help="delete a user, their tokens and sessions")
    remove.add_argument("name")
    return parser


def database_path(args: argparse.Namespace) -> Path:
    from web.store import DB_NAME

    if args.user_directory is not None:
        return Path(args.user_directory) / DB_NAME
    return (args.base_directory or Path.cwd()).resolve() / "user" / DB_NAME


def _password(environ: dict, err: TextIO) -> str:
    if environ.get(PASSWORD_ENV):
        return environ[PASSWORD_ENV]
    first = getpass.getpass("password: ")
    if first != getpass.getpass("again: "):
        raise AuthError("the passwords differ")
    return first


def main(argv: Sequence[str], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         environ: dict | None = None) -> int:
    args = build_parser().parse_args(list(argv))
    environ = dict(os.environ) if environ is None else environ
    store = UserStore(database_path(args))
    try:
        if args.command == "add":
            user = store.add_user(args.name, _password(environ, err), args.role)
            print(f"added {user.name} ({user.role})", file=out)
        elif args.command == "list":
            for user in store.users():
                print(f"{user.name}\t{user.role}", file=out)
        elif args.command == "passwd":
            store.set_password(args.name, _password(environ, err))
            print(f"password of {args.name} changed", file=out)
        elif args.command == "role":
            store.set_role(args.name, args.role)
            print(f"{args.name} is now {args.role}", file=out)
        elif args.command == "remove":
            store.remove_user(args.name)
            print(f"removed {args.name}", file=out)
    except AuthError as exc:
        print(f"error: {exc}", file=err)
        return 1
    finally:
        store.close()
    return 0
