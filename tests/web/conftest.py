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


# --ray (tests/web/test_ray_*.py): one local Ray instance per session (it takes seconds to start),
# a server with 2 worker actors per test. Ray is imported only when a test asks for these.
@pytest.fixture(scope="session")
def ray_cluster():
    from tests.web.ray_harness import start_ray_cluster

    import shutil

    ray, temp = start_ray_cluster()
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
async def ray_server(ray_cluster, tmp_path):
    from tests.web.ray_harness import start_ray_server

    server = await start_ray_server(tmp_path)
    try:
        yield server
    finally:
        await server.close()
