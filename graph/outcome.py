"""What `Executor.execute` returns: the prompt's status and what history stores."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExecutionOutcome:
    status: str  # "success" | "error" | "interrupted"
    ui_outputs: dict[str, Any] = field(default_factory=dict)  # history "outputs"
    meta: dict[str, dict] = field(default_factory=dict)  # history "meta"
    messages: list[tuple[str, dict]] = field(default_factory=list)  # history status.messages
    executed: list[str] = field(default_factory=list)  # ids that ran (not cache hits)
    error: dict | None = None  # the execution_error / execution_interrupted data, if any
