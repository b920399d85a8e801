"""Fixtures for the graph engine tests: a registry loaded with the V1 test pack."""
from __future__ import annotations

import pytest

from graph.registry import Registry
from tests.graph.packs.testing_pack import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
from tests.graph.packs.testing_pack.nodes_basic import CallLog


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    for class_type, cls in NODE_CLASS_MAPPINGS.items():
        reg.add_v1(class_type, cls, display_name=NODE_DISPLAY_NAME_MAPPINGS.get(class_type),
                   python_module="custom_nodes.testing_pack")
    return reg


@pytest.fixture
def calls() -> list:
    CallLog.calls = []
    yield CallLog.calls
    CallLog.calls = []


class Recorder:
    """A sink that keeps every event."""

    def __init__(self) -> None:
        self.events = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, type_: str) -> list[dict]:
        return [e.data for e in self.events if e.type == type_]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
