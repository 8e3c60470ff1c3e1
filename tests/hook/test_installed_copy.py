"""The decision cache and the code that decides: an installed copy of the package, edited.

The code a stored decision depends on is every module the cold run loaded (nri_plugin's and
PyYAML's: core.inputs.loaded_code), not a list of directories. Each test copies the
package (and PyYAML) to a temporary install, runs the hook from there as the fast entry
does (`python3 -I -S .../hook/__main__.py`, in processes), stores a decision and then
changes one thing: the next run must decide cold.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CTR = "/kubepods/pod-a/ctr-1"
NAME = "io.kubernetes.cri.container-name"
TYPE = "io.kubernetes.cri.container-type"
PACKAGE = Path(__file__).resolve().parents[2] / "nri_plugin"
# Where an edit shows the old bug best: the cold path loads these, the old key did not.
PREFERRED = {"config": "values.py", "ops": "event.py", "yaml": "constructor.py"}


class Install:
    """A copy of nri_plugin and PyYAML under tmp_path, a fake v2 node and a hook to run."""

    def __init__(self, tmp_path: Path, h, sla: str = "memory:\n  max: 64Mi\n") -> None:
        self.top = tmp_path / "install"
        self.pkg = self.top / "nri_plugin"
        no_cache = shutil.ignore_patterns("__pycache__")
        shutil.copytree(PACKAGE, self.pkg, ignore=no_cache)
        shutil.copytree(Path(yaml.__file__).parent, self.top / "yaml", ignore=no_cache)
        self.root = tmp_path / "cg"
        h.fake_v2_tree(self.root, CTR)
        self.config = tmp_path / "config.yaml"
        self.config.write_text("enforcement: hard\n")
        self.cache = tmp_path / "cache"
        bundle = h.write_bundle(
            tmp_path / "bundle",
            {TYPE: "container", NAME: "app", "sla.nri.io/pod": sla},
            CTR,
        )
        self.state = h.state_json(bundle)
        self.loaded: list[str] = []

    def cold(self) -> bool:
        """Run the hook once; True when it decided cold (it loaded the cold path)."""
        proc = subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                "-X",
                "importtime",
                str(self.pkg / "hook" / "__main__.py"),
                "--config",
                str(self.config),
                "--cgroup-root",
                str(self.root),
                "--cache-dir",
                str(self.cache),
            ],
            input=self.state,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        self.loaded = [
            line.rsplit("|", 1)[-1].strip()
            for line in proc.stderr.decode().splitlines()
            if line.startswith("import time:")
        ]
        return "nri_plugin.hook.cold" in self.loaded

    def settle(self) -> None:
        """A cold run stores the decision, then runs hit: also after the first run of the
        copy, whose imports create __pycache__ in every directory they load from. A run
        that starts within SETTLE_NS of a file's change (the copy, an edit) stores nothing,
        so it may take a second cold run."""
        runs = 0
        while self.cold():
            runs += 1
            assert runs < 3, "two cold runs in a row stored nothing"
        assert not self.cold()

    def edit(self, path: Path) -> None:
        """Rewrite a module in place with a comment added, as an operator's hotfix."""
        path.write_bytes(path.read_bytes() + b"\n# edited\n")


@pytest.fixture
def install(tmp_path, h) -> Install:
    return Install(tmp_path, h)


def _directories(install: Install) -> dict[str, list[Path]]:
    """The package directories (relative to the install) the last run loaded modules from,
    each with the files of those modules, packages' __init__.py last."""
    found: dict[str, list[Path]] = {}
    for module in install.loaded:
        parts = module.split(".")
        if parts[0] not in ("nri_plugin", "yaml"):
            continue
        for directory, name in (
            ("/".join(parts[:-1]), parts[-1] + ".py"),
            ("/".join(parts), "__init__.py"),
        ):
            if (install.top / directory / name).is_file():
                found.setdefault(directory, []).append(install.top / directory / name)
    return {
        d: sorted(files, key=lambda f: (f.name == "__init__.py", f.name))
        for d, files in found.items()
    }


def _module_to_edit(directory: str, files: list[Path]) -> Path:
    """The preferred module of `directory`, else its first loaded module."""
    preferred = PREFERRED.get(directory.rpartition("/")[2])
    return next((f for f in files if f.name == preferred), files[0])


def test_an_edit_in_each_package_directory_is_decided_cold(install):
    """Every directory the cold run loaded a module from (nri_plugin's top, every
    subpackage, config/ and ops/ among them; PyYAML only for YAML beyond the subset
    reader's): a module of it edited in place makes the next run decide cold, and the
    run after that hits again."""
    assert install.cold()
    directories = _directories(install)
    expected = {
        "nri_plugin",
        "nri_plugin/config",
        "nri_plugin/ops",
        "nri_plugin/core",
        "nri_plugin/sla",
        "nri_plugin/plan",
        "nri_plugin/enforce",
        "nri_plugin/hook",
        "nri_plugin/text",
        "nri_plugin/topology",
    }
    assert expected <= set(directories), sorted(directories)
    install.settle()
    hits = []
    for directory, files in sorted(directories.items()):
        module = _module_to_edit(directory, files)
        install.edit(module)
        if not install.cold():
            hits.append(str(module.relative_to(install.top)))
        install.settle()
    assert hits == [], "edited, and the next run was still a cache hit"


def test_an_edit_in_pyyaml_is_decided_cold_for_an_sla_beyond_the_subset(tmp_path, h):
    """Flow style is beyond the subset reader: PyYAML reads the SLA, so its modules are in
    the code the decision depends on, and an edit of one makes the next run decide cold."""
    install = Install(tmp_path, h, sla="memory: {max: 64Mi}\n")
    assert install.cold()
    files = _directories(install).get("yaml")
    assert files, "a flow-style SLA was read without PyYAML"
    install.settle()
    install.edit(_module_to_edit("yaml", files))
    assert install.cold(), "PyYAML edited, and the next run was still a cache hit"


def test_a_node_config_file_change_is_decided_cold(install):
    """The node config's bytes are in the key: an edit that changes a decision's outcome
    (hard to soft) and one that changes nothing it asks for both decide cold."""
    install.settle()
    install.config.write_text("enforcement: soft\n")
    assert install.cold()
    install.settle()
    install.config.write_text("enforcement: soft\n# reviewed\n")
    assert install.cold()
    install.settle()


def test_an_upgraded_install_never_reuses_a_decision(install):
    """A module of the decision edited in place (same size, mtime set back), replaced the
    way dpkg and pip do (a new file renamed over it, same bytes and mtime) or a module
    added next to them is a miss; a module the decision never loaded (the NVML reader, for
    a CPU/memory SLA) changes nothing."""
    install.settle()
    planner = install.pkg / "plan" / "planner.py"
    st = planner.stat()
    text = planner.read_bytes()
    planner.write_bytes(text.replace(b"def ", b"def ", 1))  # rewritten in place, same bytes
    os.utime(planner, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert planner.stat().st_size == st.st_size and planner.stat().st_ino == st.st_ino
    assert install.cold()
    install.settle()
    new = planner.with_suffix(".py.dpkg-new")
    new.write_bytes(text)
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    new.rename(planner)
    assert install.cold()
    install.settle()
    (install.pkg / "sla" / "added.py").write_text("")
    assert install.cold()
    install.settle()
    nvml = install.pkg / "topology" / "nvml_gpus.py"
    assert "nri_plugin.topology.nvml_gpus" not in install.loaded
    install.edit(nvml)
    assert not install.cold()
