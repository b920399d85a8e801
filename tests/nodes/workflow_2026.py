"""Run an API-format prompt on the built-in nodes, recording which node ids ran (the tests of
the 2026 node set: lazy branches, dynamic inputs as the editor sends them)."""
from __future__ import annotations

from typing import Any

from graph.executor import Executor
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment


class Runner:
    def __init__(self, root) -> None:
        self.env = Environment.rooted_at(root)
        self.env.ensure_dirs()
        self.registry = Registry()
        register_builtin_nodes(self.registry)
        self.ran: list[str] = []
        self.executor = Executor(self.registry, env=self.env,
                                 before_node_call=[lambda node_id, _i, _g: self.ran.append(node_id)])

    async def validate(self, prompt: dict) -> Any:
        return await validate_prompt(prompt, self.registry, env=self.env)

    async def run(self, prompt: dict, prompt_id: str = "p") -> Any:
        checked = await self.validate(prompt)
        assert checked.ok, (checked.error, checked.node_errors)
        self.ran.clear()
        return await self.executor.execute(prompt, prompt_id, outputs=checked.outputs,
                                           extra_data={"extra_pnginfo": {"workflow": {}}})


def node(class_type: str, **inputs: Any) -> dict:
    return {"class_type": class_type, "inputs": inputs}
