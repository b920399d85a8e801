"""The cross-site guard's decisions (unit level; the live server is tested in test_web_security)."""
from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from web.config import ServerConfig, is_loopback_host
from web.middlewares import cross_site_reason

LOOPBACK = ServerConfig(listen=("127.0.0.1",))
ALL = ServerConfig(listen=("0.0.0.0",))


def _req(method: str = "POST", **headers: str):
    return make_mocked_request(method, "/prompt", headers=headers)


def test_loopback_names():
    assert is_loopback_host("localhost") and is_loopback_host("127.0.0.5") and is_loopback_host("[::1]")
    assert not is_loopback_host("example.com") and not is_loopback_host("192.168.1.2")


def test_same_origin_is_allowed():
    assert cross_site_reason(_req(Host="127.0.0.1:8188", Origin="http://127.0.0.1:8188"), LOOPBACK) is None
    assert cross_site_reason(_req(Host="localhost:8188"), LOOPBACK) is None  # scripts send no Origin


def test_foreign_origin_is_refused():
    assert "does not match" in cross_site_reason(_req(Host="127.0.0.1:8188", Origin="http://evil.com"), LOOPBACK)
    assert "does not match" in cross_site_reason(
        _req(Host="127.0.0.1:8188", Origin="http://127.0.0.1:9999"), LOOPBACK)


def test_null_origin_and_sec_fetch_site_are_refused():
    assert cross_site_reason(_req(Host="127.0.0.1:8188", Origin="null"), LOOPBACK) == "Origin is null"
    assert "Sec-Fetch-Site" in cross_site_reason(_req(Host="127.0.0.1:8188", **{"Sec-Fetch-Site": "cross-site"}),
                                                 LOOPBACK)


def test_top_level_navigation_from_another_site_may_open_the_editor():
    req = make_mocked_request("GET", "/", headers={"Host": "127.0.0.1:8188", "Sec-Fetch-Site": "cross-site",
                                                   "Sec-Fetch-Mode": "navigate"})
    assert cross_site_reason(req, LOOPBACK) is None


def test_dns_rebinding_host_is_refused_only_when_bound_to_loopback():
    req = _req(Host="attacker.example:8188", Origin="http://attacker.example:8188")
    assert "not a loopback name" in cross_site_reason(req, LOOPBACK)
    assert cross_site_reason(req, ALL) is None  # a LAN server is reached by any name
