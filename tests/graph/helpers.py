"""Small helpers shared by the graph tests."""
from __future__ import annotations

from typing import Any

from graph.executor import Executor
from graph.validation import validate_prompt


async def run_prompt(executor: Executor, prompt: dict, prompt_id: str = "p", *, sink=None, interrupt=None,
                     extra_data: dict | None = None, partial: list[str] | None = None):
    """Validate then execute, failing the test on a validation error."""
    result = await validate_prompt(prompt, executor.registry, partial_execution_targets=partial)
    assert result.ok, (result.error, result.node_errors)
    return await executor.execute(prompt, prompt_id, outputs=result.outputs, extra_data=extra_data or {},
                                  sink=sink, interrupt=interrupt)


def node(class_type: str, **inputs: Any) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def ran(calls: list, name: str) -> list[dict]:
    """The keyword arguments of every recorded call of node class `name`."""
    return [kw for n, kw in calls if n == name]


class Flag:
    """A settable interrupt flag."""

    def __init__(self, value: bool = False) -> None:
        self.value = value

    def is_set(self) -> bool:
        return self.value

    def set(self) -> None:
        self.value = True
