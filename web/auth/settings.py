"""The settings of the users mode (`--users`), as one frozen object. None on `ServerConfig.auth`
(the default) means the single-user server, exactly as it was."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SESSION_HOURS = 24 * 7
DEFAULT_PROMPTS_PER_MINUTE = 60
DEFAULT_QUEUE_QUOTA = 100


@dataclass(frozen=True)
class AuthSettings:
    """`--users` and its limits (docs/auth.md)."""

    session_hours: float = DEFAULT_SESSION_HOURS  # a login session's lifetime
    prompts_per_minute: int = DEFAULT_PROMPTS_PER_MINUTE  # --user-prompt-rate: POST /prompt per user (0: no limit)
    queue_quota: int = DEFAULT_QUEUE_QUOTA  # --user-queue-quota: pending prompts per user (0: no limit)
    # Failed logins (per user name and per client address) before each further attempt waits,
    # and the longest wait (the delay doubles with every failure past the free ones).
    free_login_failures: int = 3
    max_login_delay_s: float = 900.0

    def __post_init__(self) -> None:
        for name in ("prompts_per_minute", "queue_quota", "free_login_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"AuthSettings.{name}: expected an integer >= 0, got {value!r}")
        for name in ("session_hours", "max_login_delay_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"AuthSettings.{name}: expected a positive number, got {getattr(self, name)!r}")
