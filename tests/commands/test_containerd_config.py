"""`nri-sla containerd-config` against a kubeadm-style node config (tests/commands/data):
every key nri-sla does not own stays as it was, lists it shares are extended, the
drop-in is of the main config's version (containerd refuses a newer one), containerd 1.7
gets its main config patched in place (1.7 merges imports by whole plugin section) with
the original kept, and --remove puts back exactly what was there."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nri_plugin.cli import main
from nri_plugin.commands.containerd_dropin import (
    MARKER,
    PASSED_ANNOTATIONS,
    ContainerdVersion,
    parse_version,
)
from nri_plugin.commands.containerd_patch import BACKUP_SUFFIX
from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, EXIT_UNAVAILABLE, InvalidInput
from tests.support.toml_keys import flat

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
NRI = "io.containerd.nri.v1.nri"
RUNTIME = {
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
KUBEADM = {"1.7": DATA / "kubeadm-1.7.toml", "2.x": DATA / "kubeadm-2.x.toml"}


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["containerd-config", *args])
    out, err = capsys.readouterr()
    return status, out, err


def runc_of(doc: dict, config_version: int) -> dict:
    return doc["plugins"][RUNTIME[config_version]]["containerd"]["runtimes"]["runc"]


def merged_2x(main_doc: dict, dropin: dict) -> dict[tuple[str, ...], Any]:
    """What containerd 2.x makes of an imported file: tables merged key by key, a list
    the drop-in sets replacing the main config's (its mergo merge)."""
    keys = flat(main_doc)
    keys.update(flat(dropin))
    return keys


def node(tmp_path: Path, which: str) -> tuple[Path, Path]:
    """The kubeadm config at tmp_path/config.toml importing tmp_path/conf.d/*.toml."""
    main_config = tmp_path / "config.toml"
    main_config.write_text(
        KUBEADM[which].read_text().replace("/etc/containerd/conf.d", str(tmp_path / "conf.d"))
    )
    main_config.chmod(0o600)
    return main_config, tmp_path / "conf.d" / "nri-sla.toml"


def ours(config_version: int, systemd: bool = False) -> set[tuple[str, ...]]:
    runc = ("plugins", RUNTIME[config_version], "containerd", "runtimes", "runc")
    keys = {("plugins", NRI, "disable"), (*runc, "pod_annotations")}
    return keys | ({(*runc, "options", "SystemdCgroup")} if systemd else set())


@pytest.mark.parametrize("version, config_version", [("2.0", 3), ("2.2", 3), ("2.3", 3)])
def test_2x_dropin_keeps_every_key_it_does_not_own(capsys, tmp_path, version, config_version):
    main_config, dropin = node(tmp_path, "2.x")
    before = main_config.read_text()
    status, _out, err = run(
        capsys,
        "--containerd-version",
        version,
        "--write",
        str(dropin),
        "--main-config",
        str(main_config),
        "--no-base-spec",
    )
    assert status == EXIT_OK, err
    assert main_config.read_text() == before  # never touched on 2.x
    text = dropin.read_text()
    assert text.startswith(MARKER)
    doc = tomllib.loads(text)
    # the main config's version, not 2.3's 4: containerd refuses a drop-in newer than it
    assert doc["version"] == config_version
    main_doc = tomllib.loads(before)
    after = merged_2x(main_doc, doc)
    changed = {k for k in after if flat(main_doc).get(k) != after[k]}
    assert changed == ours(config_version) - {("version",)}
    # the node's own annotations still pass, then the SLA keys
    assert runc_of(doc, config_version)["pod_annotations"] == [
        "monitoring.example.com/*",
        *PASSED_ANNOTATIONS,
    ]
    assert set(flat(doc)) == ours(config_version) | {("version",)}
    assert "does not import" not in err


def test_2_3_writes_version_4_for_a_version_4_config_or_none(capsys, tmp_path):
    main_config, dropin = node(tmp_path, "2.x")
    main_config.write_text(main_config.read_text().replace("version = 3", "version = 4"))
    run(
        capsys,
        "--containerd-version",
        "2.3",
        "--write",
        str(dropin),
        "--main-config",
        str(main_config),
        "--no-base-spec",
    )
    assert tomllib.loads(dropin.read_text())["version"] == 4
    status, out, _ = run(
        capsys, "--containerd-version", "2.3", "--main-config", str(tmp_path / "absent.toml")
    )
    assert status == EXIT_OK and tomllib.loads(out)["version"] == 4
    assert [ContainerdVersion(*v).config_version for v in ((1, 7), (2, 2), (2, 3))] == [2, 3, 4]


def test_1_7_patches_the_main_config_in_place_and_remove_restores_it(capsys, tmp_path):
    main_config, dropin = node(tmp_path, "1.7")
    before = main_config.read_bytes()
    common = ("--containerd-version", "1.7", "--main-config", str(main_config), "--no-base-spec")
    # an earlier nri-sla's drop-in, which resets the CRI plugin on 1.7: taken out
    dropin.parent.mkdir()
    dropin.write_text(MARKER + " for containerd 1.7\nversion = 2\n")
    status, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run")
    assert status == EXIT_OK and main_config.read_bytes() == before and dropin.exists()
    assert f"--- {main_config}\n+++ {main_config}\n" in out
    removed = [
        line for line in out.splitlines() if line.startswith("-") and not line.startswith("---")
    ]
    assert removed == [
        '-        pod_annotations = ["monitoring.example.com/*"]',
        "-" + MARKER + " for containerd 1.7",
        "-version = 2",
    ]
    status, out, err = run(capsys, *common, "--write", str(dropin), "--systemd-cgroup", "true")
    assert status == EXIT_OK, err
    assert f"patched {main_config}" in out and f"took out {dropin}" in out
    assert not dropin.exists()
    assert (tmp_path / ("config.toml" + BACKUP_SUFFIX)).read_bytes() == before
    assert oct(main_config.stat().st_mode & 0o777) == "0o600"
    patched = main_config.read_text()
    # every line of the original is still there, in order, comments included
    kept = [line for line in patched.splitlines()[1:] if line and "pod_annot" not in line]
    original = [line for line in before.decode().splitlines() if line and "pod_annot" not in line]
    assert [line for line in kept if line in original] == original
    old, new = flat(tomllib.loads(before.decode())), flat(tomllib.loads(patched))
    assert {k for k in new if old.get(k) != new[k]} == ours(2, systemd=True) - {
        ("plugins", RUNTIME[2], "containerd", "runtimes", "runc", "options", "SystemdCgroup")
    }
    assert runc_of(tomllib.loads(patched), 2)["pod_annotations"] == [
        "monitoring.example.com/*",
        *PASSED_ANNOTATIONS,
    ]
    # the same settings again: nothing written
    mtime = main_config.stat().st_mtime_ns
    status, out, _ = run(capsys, *common, "--write", "--systemd-cgroup", "true")
    assert out.startswith(f"{main_config}: unchanged") and main_config.stat().st_mtime_ns == mtime
    status, out, _ = run(
        capsys, "--remove", "--main-config", str(main_config), "--write", str(dropin), "--dry-run"
    )
    assert '+        pod_annotations = ["monitoring.example.com/*"]' in out
    assert main_config.read_text() == patched
    status, out, _ = run(
        capsys, "--remove", "--main-config", str(main_config), "--write", str(dropin)
    )
    assert status == EXIT_OK and f"restored {main_config}" in out
    assert main_config.read_bytes() == before
    assert oct(main_config.stat().st_mode & 0o777) == "0o600"
    assert not (tmp_path / ("config.toml" + BACKUP_SUFFIX)).exists()


def test_1_7_remove_refuses_a_main_config_edited_since(capsys, tmp_path):
    main_config, _ = node(tmp_path, "1.7")
    run(
        capsys,
        "--containerd-version",
        "1.7",
        "--main-config",
        str(main_config),
        "--no-base-spec",
        "--write",
    )
    edited = main_config.read_text() + "oom_score = -999\n"
    main_config.write_text(edited)
    status, out, err = run(capsys, "--remove", "--main-config", str(main_config))
    assert (status, out) == (EXIT_INVALID, "")
    assert err == (
        f"nri-sla containerd-config: {main_config} was edited after nri-sla "
        f"patched it: nri-sla leaves it alone; its original is {main_config}"
        f"{BACKUP_SUFFIX}: merge your edits into it, or take nri-sla's keys out "
        f"by hand (docs/install.md lists them) and drop the first line\n"
    )
    assert main_config.read_text() == edited


def test_1_7_without_a_main_config_creates_one_and_remove_deletes_it(capsys, tmp_path):
    main_config = tmp_path / "config.toml"
    status, _, _ = run(
        capsys,
        "--containerd-version",
        "1.7",
        "--main-config",
        str(main_config),
        "--no-base-spec",
        "--write",
    )
    doc = tomllib.loads(main_config.read_text())
    assert status == EXIT_OK and doc["version"] == 2
    assert doc["plugins"][NRI] == {"disable": False}
    run(capsys, "--remove", "--main-config", str(main_config))
    assert not main_config.exists() and list(tmp_path.iterdir()) == []


def test_remove_takes_out_the_dropin_and_an_unnamed_base_spec(capsys, tmp_path):
    main_config, dropin = node(tmp_path, "2.x")
    spec = tmp_path / "base-runtime-spec.json"
    spec.write_text("{}")
    dropin.parent.mkdir()
    dropin.write_text(MARKER + f'\nversion = 3\nbase_runtime_spec = "{spec}"\n')
    (tmp_path / "conf.d" / "other.toml").write_text("version = 3\n")
    status, _out, _ = run(
        capsys,
        "--remove",
        "--main-config",
        str(main_config),
        "--write",
        str(dropin),
        "--base-runtime-spec",
        str(spec),
    )
    assert status == EXIT_OK
    assert not dropin.exists() and not spec.exists()
    assert (tmp_path / "conf.d" / "other.toml").exists()
    # a spec some other file still names is kept: containerd would not start without it
    spec.write_text("{}")
    (tmp_path / "conf.d" / "other.toml").write_text(f'base_runtime_spec = "{spec}"\n')
    _, _, err = run(
        capsys,
        "--remove",
        "--main-config",
        str(main_config),
        "--write",
        str(dropin),
        "--base-runtime-spec",
        str(spec),
    )
    assert spec.exists() and f"kept {spec}" in err


def test_fail_closed_names_the_pods_to_tolerate(capsys, tmp_path):
    status, out, err = run(
        capsys,
        "--containerd-version",
        "2.2",
        "--fail-closed",
        "--main-config",
        str(tmp_path / "absent.toml"),
    )
    assert status == EXIT_OK
    validator = tomllib.loads(out)["plugins"][NRI]["default_validator"]
    shipped = tomllib.loads((REPO / "config.toml.example").read_text())
    assert validator == shipped["plugins"][NRI]["default_validator"]
    for pod in ("CNI", "kube-proxy", "static pods", "tolerate-missing-plugins.nri.io"):
        assert pod in err


@pytest.mark.parametrize("version", ["1.7", "2.0", "2.1"])
def test_fail_closed_refused_without_a_validator(capsys, tmp_path, version):
    status, out, err = run(
        capsys,
        "--containerd-version",
        version,
        "--fail-closed",
        "--main-config",
        str(tmp_path / "absent.toml"),
    )
    assert status == EXIT_INVALID and out == ""
    assert len(err.splitlines()) == 1 and f"containerd {version} has no NRI default" in err


def test_a_config_version_nri_sla_cannot_write_is_one_line(capsys, tmp_path):
    main_config = tmp_path / "config.toml"
    main_config.write_text("version = 1\n")
    status, out, err = run(capsys, "--containerd-version", "2.1", "--main-config", str(main_config))
    assert (status, out) == (EXIT_INVALID, "")
    assert err == (
        "nri-sla containerd-config: containerd's config has version = 1: "
        "nri-sla writes config versions 2 to 4 (`containerd config migrate` "
        "converts)\n"
    )


def test_without_ctr_no_base_spec_and_says_why(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no containerd, no ctr
    main_config, dropin = node(tmp_path, "2.x")
    status, _, err = run(
        capsys,
        "--containerd-version",
        "2.2",
        "--main-config",
        str(main_config),
        "--write",
        str(dropin),
    )
    assert status == EXIT_OK
    assert "base_runtime_spec" not in dropin.read_text()
    assert err.splitlines()[0] == (
        "nri-sla containerd-config: no base_runtime_spec, the OCI "
        "hook fallback stays off: no ctr beside containerd or on "
        "PATH (give --ctr)"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", (1, 7)),
        (
            "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e81"
            "1ccb4d8d3b\n",
            (2, 1),
        ),
        ("2.2", (2, 2)),
    ],
)
def test_version_from_containerd_output(text, expected):
    version = parse_version(text, "containerd --version")
    assert (version.major, version.minor) == expected


@pytest.mark.parametrize("text", ["1.6.33", "3.0", "containerd dev"])
def test_unsupported_versions_are_one_line(text):
    with pytest.raises(InvalidInput, match="containerd"):
        parse_version(text, "--containerd-version")


def test_write_dry_run_and_idempotent_rewrite(capsys, tmp_path):
    main_config, dropin = node(tmp_path, "2.x")
    common = ("--containerd-version", "2.2", "--main-config", str(main_config), "--no-base-spec")
    status, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run")
    assert status == EXIT_OK and not dropin.exists()
    assert out.startswith(f"--- /dev/null\n+++ {dropin}\n")
    assert "+version = 3\n" in out
    run(capsys, *common, "--write", str(dropin))
    assert oct(dropin.stat().st_mode & 0o777) == "0o644"
    before = os.stat(dropin)
    status, out, _ = run(capsys, *common, "--write", str(dropin))
    assert out == f"{dropin}: unchanged\n"
    assert (os.stat(dropin).st_ino, os.stat(dropin).st_mtime_ns) == (
        before.st_ino,
        before.st_mtime_ns,
    )
    _, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run", "--fail-closed")
    assert '+required_plugins = ["nri-sla"]' in out.splitlines()
    _, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run")
    assert out == "no change\n"


def test_never_overwrites_a_foreign_file(capsys, tmp_path):
    dropin = tmp_path / "nri-sla.toml"
    dropin.write_text("version = 3\n# the operator's own\n")
    status, out, err = run(
        capsys,
        "--containerd-version",
        "2.2",
        "--write",
        str(dropin),
        "--main-config",
        str(tmp_path / "absent.toml"),
        "--no-base-spec",
    )
    assert status == EXIT_INVALID and out == ""
    assert err.splitlines()[-1] == (
        f"nri-sla containerd-config: {dropin} exists and was "
        f"not written by nri-sla: move it away or give another "
        f"--write path"
    )
    assert dropin.read_text() == "version = 3\n# the operator's own\n"


def test_says_when_containerd_would_not_import_it(capsys, tmp_path):
    main_config = tmp_path / "config.toml"
    main_config.write_text('version = 3\nimports = ["/etc/containerd/other.toml"]\n')
    dropin = tmp_path / "conf.d" / "nri-sla.toml"
    status, _, err = run(
        capsys,
        "--containerd-version",
        "2.1",
        "--write",
        str(dropin),
        "--main-config",
        str(main_config),
        "--no-base-spec",
    )
    assert status == EXIT_OK
    assert (
        f'{main_config} does not import {dropin}: add imports = ["{tmp_path}/conf.d/*.toml"]' in err
    )


def test_version_value_is_plain():
    assert str(ContainerdVersion(2, 2)) == "2.2"
    assert ContainerdVersion(2, 2).has_validator and not ContainerdVersion(2, 1).has_validator


def test_without_containerd_or_its_version_is_unavailable(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no containerd to ask
    status, out, err = run(capsys)
    assert (status, out) == (EXIT_UNAVAILABLE, "")
    assert (
        err == "nri-sla containerd-config: cannot run `containerd --version`: give "
        "--containerd-version\n"
    )


def test_an_unwritable_path_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, out, err = run(
        capsys,
        "--containerd-version",
        "2.2",
        "--write",
        str(blocker / "nri-sla.toml"),
        "--main-config",
        str(tmp_path / "absent.toml"),
        "--no-base-spec",
    )
    assert status == EXIT_INTERNAL and out == ""
    assert err.splitlines()[-1].startswith(
        f"nri-sla containerd-config: cannot write {blocker}/nri-sla.toml: "
    )


def containerd_dump(containerd: str, main_config: Path) -> dict[tuple[str, ...], Any]:
    out = subprocess.run(
        [containerd, "--config", str(main_config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return flat(tomllib.loads(out))


@pytest.mark.skipif(
    not os.environ.get("NRI_SLA_CONTAINERD"),
    reason="NRI_SLA_CONTAINERD is not set: no real containerd to run `config dump` (docs/e2e.md)",
)
def test_real_config_dump_changes_only_our_keys_and_remove_restores_it(capsys, tmp_path):
    """The systemd cgroup driver and the rest of a kubeadm node as the real containerd
    reads them (`config dump` runs no daemon, so no systemd is needed): writing changes
    only nri-sla's keys, removing gives the same dump back."""
    containerd = os.environ["NRI_SLA_CONTAINERD"]
    version = parse_version(
        subprocess.run(
            [containerd, "--version"], capture_output=True, text=True, check=True
        ).stdout,
        "containerd",
    )
    main_config, dropin = node(tmp_path, "1.7" if version.major < 2 else "2.x")
    before = containerd_dump(containerd, main_config)
    runc = [k for k in before if k[-2:] == ("options", "SystemdCgroup")]
    assert runc and all(before[k] is True for k in runc)
    status, _, err = run(
        capsys,
        "--containerd-version",
        f"{version.major}.{version.minor}",
        "--main-config",
        str(main_config),
        "--write",
        str(dropin),
        "--no-base-spec",
    )
    assert status == EXIT_OK, err
    after = containerd_dump(containerd, main_config)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    runtime = RUNTIME[2] if version.major < 2 else RUNTIME[3]
    annotations = ("plugins", runtime, "containerd", "runtimes", "runc", "pod_annotations")
    # NRI is on by default from 2.0: there the annotations are all that changes
    assert annotations in changed <= {("plugins", NRI, "disable"), annotations}
    assert after[annotations][0] == "monitoring.example.com/*"
    assert after[("plugins", NRI, "disable")] is False
    run(capsys, "--remove", "--main-config", str(main_config), "--write", str(dropin))
    assert containerd_dump(containerd, main_config) == before
