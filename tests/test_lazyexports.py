"""The lazy re-exports of the packages the OCI hook passes through (core, topology,
config)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])


def loaded_after(code: str) -> list[str]:
    """The nri_plugin modules and importlib loaded by `code` in a fresh interpreter."""
    probe = (f"import sys; sys.path.insert(0, {ROOT!r}); {code}; "
             "print(' '.join(m for m in sys.modules if m.startswith(('nri_plugin', "
             "'importlib'))))")
    return subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True,
                          text=True, check=True).stdout.split()


@pytest.mark.parametrize(("package", "name", "module"), [
    ("nri_plugin.core", "ContainerRequest", "nri_plugin.core.request"),
    ("nri_plugin.topology", "read_topology", "nri_plugin.topology.cpus"),
])
def test_a_name_loads_its_module_on_first_use_only(package, name, module):
    assert module not in loaded_after(f"import {package}")
    assert "importlib" not in loaded_after(f"import {package}")
    assert module in loaded_after(f"import {package}; {package}.{name}")


def test_exports_are_listed_and_unknown_names_refused():
    import nri_plugin.core as core
    import nri_plugin.topology as topology

    assert "ContainerRequest" in core.__all__ and "ContainerRequest" in dir(core)
    assert topology.parse_cpulist("0-2") == {0, 1, 2}
    assert vars(topology)["parse_cpulist"] is topology.parse_cpulist  # cached
    with pytest.raises(AttributeError, match=r"'nri_plugin\.topology' has no attribute 'nope'"):
        topology.nope  # noqa: B018


def test_the_config_package_loads_its_modules_on_first_use_only():
    import nri_plugin.config as config

    loaded = loaded_after("import nri_plugin.config")
    assert [m for m in loaded if m.startswith("nri_plugin.config.")] == []
    assert "importlib" not in loaded
    # the module's public names before it became a package, each from its part
    assert config.load_config.__module__ == "nri_plugin.config.loader"
    assert config.NodeConfig.__module__ == "nri_plugin.config.values"
    assert "gpu" in config.TOP_KEYS and "enforcement" in config.TOP_KEYS
    assert config.KEY_ATTRIBUTES["watch.interval-seconds"] == ("watch", "interval")
