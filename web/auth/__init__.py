"""The users mode (`--users`, docs/auth.md): users with roles, password login for the editor,
API tokens for scripts, one middleware in front of every route, and per-user isolation of
prompts, history, jobs, files and WebSocket events.

  settings.py    AuthSettings (ServerConfig.auth; None = the single-user server, unchanged)
  store.py       UserStore: the users mode's tables in the server's SQLite database
  service.py     AuthService (state.auth): who a request is, throttling, quotas, file owners
  access.py      what route handlers ask (current_user, may_see, ...) and the handler marks
  middleware.py  the one middleware (401 / 403 / CSRF)
  routes.py      the login page and /auth/* routes
  cli.py         `main.py users ...`: create the first admin, manage users from a shell

Nothing here is imported unless the mode is on (settings.py, access.py excepted: both light).
"""
