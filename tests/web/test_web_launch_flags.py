"""Launch flags that change how the server serves: --tls-keyfile/--tls-certfile (HTTPS),
--front-end-root (another editor build), --enable-compress-response-body; and /system_stats
answering while the background warm-up is still importing torch."""
from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pytest

from tests.web.web_harness import start_test_server
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig

REPO = Path(__file__).resolve().parents[2]


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A throw-away certificate for 127.0.0.1 made with the openssl command (skip without it)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    done = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                           "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {done.stderr.strip()}")
    return key, cert


async def test_tls_files_serve_https(tmp_path):
    key, cert = _self_signed(tmp_path)
    server = await start_test_server(tmp_path, tls_keyfile=key, tls_certfile=cert)
    try:
        assert server.url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cert))
        async with server.session.get(f"{server.url}/system_stats", ssl=trusted) as resp:
            assert resp.status == 200 and "system" in await resp.json()
        async with server.session.ws_connect(f"{server.url.replace('https', 'wss')}/ws", ssl=trusted) as ws:
            assert json.loads((await ws.receive(timeout=10)).data)["type"] == "status"
        plain = server.url.replace("https://", "http://")
        with pytest.raises(aiohttp.ClientError):  # no plain HTTP on that port
            async with server.session.get(f"{plain}/system_stats") as resp:
                await resp.read()
    finally:
        await server.close()
    assert ServerConfig(port=8188, tls_keyfile=key, tls_certfile=cert).url() == "https://127.0.0.1:8188"


async def test_front_end_root_serves_that_build_instead_of_the_package(tmp_path):
    root = tmp_path / "my_editor"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>my editor</title>")
    (root / "assets" / "app.js").write_text("export const mine = 1;\n")
    state = build_state(ServerConfig(base_dir=tmp_path, port=0, custom_node_dirs=(), front_end_root=root))
    runner, urls = await start_server(state, frontend=True)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{urls[0]}/") as resp:
                assert resp.status == 200 and await resp.text() == "<!doctype html><title>my editor</title>"
            async with session.get(f"{urls[0]}/assets/app.js") as resp:
                assert resp.status == 200 and await resp.text() == "export const mine = 1;\n"
                assert resp.content_type == "application/javascript"
            async with session.get(f"{urls[0]}/extensions") as resp:  # our extension is still listed
                assert any("/extensions/comfy-engine/" in url for url in await resp.json())
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("enabled", [True, False])
async def test_compress_response_body_gzips_json_for_clients_that_accept_it(tmp_path, enabled):
    server = await start_test_server(tmp_path, compress_response_body=enabled)
    try:
        async with server.session.get(f"{server.url}/object_info", headers={"Accept-Encoding": "gzip"}) as resp:
            assert resp.status == 200 and "WebTestConst" in await resp.json()
            assert (resp.headers.get("Content-Encoding") == "gzip") is enabled
        async with server.session.get(f"{server.url}/object_info", headers={"Accept-Encoding": "identity"}) as resp:
            assert "Content-Encoding" not in resp.headers
    finally:
        await server.close()


def test_system_stats_answers_while_the_warm_up_is_importing_torch(tmp_path):
    """A stand-in `torch` package whose import the test holds half-way (its `cuda` attribute is
    not there yet), in a fresh interpreter: the server listens, the warm-up thread is inside that
    import, and /system_stats must answer 200 with the torch-free facts; once the import is let
    go and the warm-up is done, it reports the loaded torch."""
    fake = tmp_path / "fake_site"
    (fake / "torch").mkdir(parents=True)
    (fake / "hold.py").write_text("import threading\nentered = threading.Event()\nrelease = threading.Event()\n")
    (fake / "torch" / "__init__.py").write_text(textwrap.dedent("""
        __version__ = "0.0-held"
        import hold
        hold.entered.set()
        hold.release.wait(60)

        class cuda:  # defined only after the hold: reading it earlier is the bug
            @staticmethod
            def is_available():
                return False
    """))
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(fake)!r})
        import asyncio, json
        import aiohttp
        import hold
        from graph.registry import Registry
        from web.app import start_server, warm_up_task
        from web.bootstrap import build_state
        from web.config import ServerConfig

        async def main():
            config = ServerConfig(base_dir=__import__("pathlib").Path({str(tmp_path)!r}), port=0,
                                  custom_node_dirs=())
            state = build_state(config, registry=Registry())
            runner, urls = await start_server(state, frontend=False, warm_up=True)
            results = {{}}
            try:
                await asyncio.get_running_loop().run_in_executor(None, hold.entered.wait, 60)
                async with aiohttp.ClientSession() as session:
                    async def stats():
                        async with session.get(urls[0] + "/system_stats") as resp:
                            body = await resp.json() if resp.status == 200 else await resp.text()
                            return resp.status, body
                    status, body = await stats()
                    results["held"] = [status, body["system"]["pytorch_version"] if status == 200 else body,
                                       "torch" in sys.modules]
                    hold.release.set()
                    await warm_up_task(runner.app)
                    status, body = await stats()
                    results["done"] = [status, body["system"]["pytorch_version"], body["devices"][0]["type"]]
            finally:
                hold.release.set()
                await runner.cleanup()
            print(json.dumps(results))

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["held"] == [200, "", True]  # torch is being imported: answered without it
    assert results["done"] == [200, "0.0-held", "cpu"]
