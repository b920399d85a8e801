"""compat.facade: lazy names over our modules, and pack assignments that reach the home module."""
from __future__ import annotations

import sys
import types

import pytest

from compat.facade import FacadeModule, facade


@pytest.fixture
def modules():
    home = types.ModuleType("facade_home_for_test")
    home.value = 1
    home.call = lambda: home.value  # our runtime calls through the home module's globals
    surface = types.ModuleType("facade_surface_for_test")
    sys.modules[home.__name__] = home
    sys.modules[surface.__name__] = surface
    yield home, surface
    del sys.modules[home.__name__], sys.modules[surface.__name__]


def test_a_name_resolves_on_first_read_and_is_cached(modules):
    home, surface = modules
    module = facade(surface.__name__, {"value": "facade_home_for_test:value"})
    assert isinstance(module, FacadeModule) and "value" not in vars(module)
    assert module.value == 1
    assert vars(module)["value"] == 1
    assert "value" in dir(module)


def test_assigning_a_facade_name_replaces_it_at_home(modules):
    home, surface = modules
    module = facade(surface.__name__, {"value": "facade_home_for_test:value"})
    module.value = 42  # what a pack does to comfy.samplers.sampling_function
    assert home.value == 42 and home.call() == 42
    module.other = 7  # a name outside the table stays the surface module's own
    assert not hasattr(home, "other")


def test_unknown_names_and_bad_tables_are_errors(modules):
    _home, surface = modules
    module = facade(surface.__name__, {"value": "facade_home_for_test:value"})
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        module.missing
    with pytest.raises(ValueError, match="package.module:attribute"):
        facade(surface.__name__, {"x": "no_colon"})


def test_a_star_import_binds_every_name_not_only_those_read_before(modules):
    home, surface = modules
    home.absent_at_home = None
    del home.absent_at_home
    facade(surface.__name__, {"value": "facade_home_for_test:value", "call": "facade_home_for_test:call",
                              "gone": "facade_home_for_test:absent_at_home",
                              "_private": "facade_home_for_test:value"})
    namespace: dict = {}
    exec(f"from {surface.__name__} import *", namespace)  # what RES4LYF does with comfy.model_sampling
    assert namespace["value"] == 1 and namespace["call"] is home.call
    # a name whose home lacks it is left out (a star import binds what exists), private names too,
    # and the surface's own helper (`facade`) is not a name of ComfyUI's module
    assert "gone" not in namespace and "_private" not in namespace and "facade" not in namespace


def test_a_star_import_of_a_real_surface_module_binds_comfyuis_names(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    with compat.install(env, Registry()).activate():
        namespace: dict = {}
        exec("from comfy.model_sampling import *", namespace)
        for name in ("EPS", "V_PREDICTION", "EDM", "X0", "CONST", "ModelSamplingDiscrete", "ModelSamplingFlux"):
            assert isinstance(namespace[name], type), name
