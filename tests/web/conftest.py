"""Fixtures for the server tests: a live server on a free loopback port with the tiny test nodes."""
from __future__ import annotations

import pytest

from tests.web.web_harness import start_test_server


@pytest.fixture
async def server(tmp_path):
    srv = await start_test_server(tmp_path)
    try:
        yield srv
    finally:
        await srv.close()
