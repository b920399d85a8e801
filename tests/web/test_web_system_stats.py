"""/system_stats with today's fields (ComfyUI server.py @002c3fb9, Comfy-Org/ComfyUI; the
template versions feed the editor's Settings > About "Templates Version")."""
from __future__ import annotations

import sys
from importlib.metadata import version

from web.routes_info import REQUIREMENTS, required_package_versions


async def test_system_stats_has_todays_fields(server):
    system = (await server.get_json("/api/system_stats"))["system"]
    assert system["os"] == sys.platform
    assert system["installed_templates_version"] == version("comfyui-workflow-templates")
    pins = required_package_versions()
    assert system["required_templates_version"] == pins["comfyui-workflow-templates"]
    assert system["required_frontend_version"] == pins["comfyui-frontend-package"]
    packages = {p["name"]: p for p in system["comfy_package_versions"]}
    assert packages["comfyui-workflow-templates"] == {
        "name": "comfyui-workflow-templates", "installed": version("comfyui-workflow-templates"),
        "required": pins["comfyui-workflow-templates"]}
    assert all(name.startswith("comfy") for name in packages)
    assert system["embedded_python"] is False and system["deploy_environment"] == "local-git"


async def test_deploy_environment_reads_comfy_environment_file(server):
    (server.state.config.base_dir / ".comfy_environment").write_text("docker-gpu\x07\nsecond line\n")
    system = (await server.get_json("/system_stats"))["system"]
    assert system["deploy_environment"] == "docker-gpu"


def test_required_versions_are_the_requirements_pins(tmp_path):
    assert "torch" in required_package_versions(REQUIREMENTS)
    pins = tmp_path / "requirements.txt"
    pins.write_text("# comment\nComfyUI-Frontend-Package==1.2.3  # editor\nfoo>=1\n\nbar == 2.0\n")
    assert required_package_versions(pins) == {"comfyui-frontend-package": "1.2.3", "bar": "2.0"}
    assert required_package_versions(tmp_path / "missing.txt") == {}
