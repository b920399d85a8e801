"""One queued prompt, and the rules for what of it may be shown or stored."""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# ComfyUI's SENSITIVE_EXTRA_DATA_KEYS: never written to disk, never listed by /queue or /history.
SENSITIVE_EXTRA_DATA_KEYS = frozenset({"auth_token_comfy_org", "api_key_comfy_org"})


# The owner of every prompt while the server has no users (a later users/tokens mode sets the
# submitting user's id instead); queue priorities are keyed by owner (web/prompt_queue.py).
DEFAULT_OWNER = "default"

# The largest magnitude a queue `number` may have. Every integer up to 2^53 is exact as a float (the
# store's REAL column, JSON) and far inside SQLite's 64-bit INTEGER, so the counter that continues
# after the highest stored number stays usable for ever; 1e308 once made every later POST a 500.
MAX_QUEUE_NUMBER = 2 ** 53


def queue_number_problem(value: Any) -> str | None:
    """Why `value` cannot be a queue `number` (None when it can): a finite int or float, not a
    bool, with |value| <= MAX_QUEUE_NUMBER."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {type(value).__name__}"
    try:
        if not math.isfinite(value) or abs(value) > MAX_QUEUE_NUMBER:
            return f"must be a finite number between -2^53 and 2^53, got {str(value)[:40]}"
    except OverflowError:  # an int too large for a float
        return f"must be a finite number between -2^53 and 2^53, got {str(value)[:40]}..."
    return None


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (ComfyUI's timestamps)."""
    return int(time.time() * 1000)


def public_extra_data(extra_data: dict) -> dict:
    """`extra_data` without the sensitive keys."""
    return {k: v for k, v in extra_data.items() if k not in SENSITIVE_EXTRA_DATA_KEYS}


@dataclass
class QueueItem:
    """A validated prompt waiting for (or in) the worker.

    Ordered like ComfyUI's heap: by `number`, then by `prompt_id` string.
    `extra_data` keeps sensitive keys in memory only (they are needed by API nodes while the
    prompt runs); `public_extra_data` is what is stored and shown.
    """

    number: float
    prompt_id: str
    prompt: dict
    extra_data: dict
    outputs: list[str]
    create_time: int = field(default_factory=now_ms)
    owner: str = DEFAULT_OWNER  # who submitted it (priorities are per owner)
    retry_of: str | None = None  # the failed / interrupted prompt this one retries (POST /api/jobs/{id}/retry)
    # Set by /interrupt (or the WebSocket `interrupt`); the executor polls `.is_set()`.
    interrupt: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @property
    def client_id(self) -> str | None:
        value = self.extra_data.get("client_id")
        return value if isinstance(value, str) and value else None

    @property
    def sort_key(self) -> tuple[float, str]:
        return (self.number, self.prompt_id)

    def __lt__(self, other: "QueueItem") -> bool:
        return self.sort_key < other.sort_key

    def wire(self) -> list[Any]:
        """ComfyUI's queue tuple `[number, prompt_id, prompt, extra_data, outputs_to_execute]`."""
        return [self.number, self.prompt_id, self.prompt, public_extra_data(self.extra_data), list(self.outputs)]
