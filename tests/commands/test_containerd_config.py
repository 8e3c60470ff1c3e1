"""`nri-sla containerd-config`: the drop-in parses as TOML of the version's config format,
carries exactly the shipped examples' NRI and pass-through settings, adds what can break
a node only when asked, and is written idempotently (a dry run diffs, writes nothing)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from nri_plugin.cli import main
from nri_plugin.commands.containerd_dropin import (
    MARKER,
    ContainerdVersion,
    parse_version,
)
from nri_plugin.errors import EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, EXIT_UNAVAILABLE, InvalidInput

REPO = Path(__file__).resolve().parents[2]
NRI = "io.containerd.nri.v1.nri"
# containerd version -> (shipped example, config version, CRI plugin holding the handlers)
VERSIONS = {
    "1.7": (REPO / "packaging" / "containerd" / "config-1.7.toml.example", 2,
            "io.containerd.grpc.v1.cri"),
    "2.0": (REPO / "config.toml.example", 3, "io.containerd.cri.v1.runtime"),
    "2.2": (REPO / "config.toml.example", 3, "io.containerd.cri.v1.runtime"),
}


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["containerd-config", *args])
    out, err = capsys.readouterr()
    return status, out, err


def runc_of(doc: dict, cri: str) -> dict:
    return doc["plugins"][cri]["containerd"]["runtimes"]["runc"]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_printed_dropin_matches_the_shipped_example(capsys, tmp_path, version):
    example_path, config_version, cri = VERSIONS[version]
    example = tomllib.loads(example_path.read_text())
    status, out, err = run(capsys, "--containerd-version", version,
                           "--base-runtime-spec", str(tmp_path / "absent.json"))
    assert status == EXIT_OK
    doc = tomllib.loads(out)
    assert doc["version"] == config_version
    assert out.startswith(MARKER)
    expected_nri = {k: v for k, v in example["plugins"][NRI].items()
                    if k != "default_validator"}
    assert doc["plugins"][NRI] == expected_nri  # nothing that fails closed
    runc = runc_of(doc, cri)
    assert runc == {"runtime_type": "io.containerd.runc.v2",
                    "pod_annotations": runc_of(example, cri)["pod_annotations"]}
    assert set(doc["plugins"]) == {NRI, cri}
    # the spec file is absent: containerd would refuse every container with it
    assert "absent.json is not there" in err


def test_base_spec_and_systemd_cgroup_only_when_asked(capsys, tmp_path):
    spec = tmp_path / "base-runtime-spec.json"
    spec.write_text("{}")
    _, out, _ = run(capsys, "--containerd-version", "1.7", "--base-runtime-spec", str(spec),
                    "--systemd-cgroup", "false")
    runc = runc_of(tomllib.loads(out), "io.containerd.grpc.v1.cri")
    assert runc["base_runtime_spec"] == str(spec)
    assert runc["options"] == {"SystemdCgroup": False}


def test_fail_closed_names_the_pods_to_tolerate(capsys, tmp_path):
    status, out, err = run(capsys, "--containerd-version", "2.2", "--fail-closed",
                           "--base-runtime-spec", str(tmp_path / "absent.json"))
    assert status == EXIT_OK
    validator = tomllib.loads(out)["plugins"][NRI]["default_validator"]
    shipped = tomllib.loads((REPO / "config.toml.example").read_text())
    assert validator == shipped["plugins"][NRI]["default_validator"]
    for pod in ("CNI", "kube-proxy", "static pods", "tolerate-missing-plugins.nri.io"):
        assert pod in err


@pytest.mark.parametrize("version", ["1.7", "2.0", "2.1"])
def test_fail_closed_refused_without_a_validator(capsys, version):
    status, out, err = run(capsys, "--containerd-version", version, "--fail-closed")
    assert status == EXIT_INVALID and out == ""
    assert len(err.splitlines()) == 1 and f"containerd {version} has no NRI default" in err


@pytest.mark.parametrize("text, expected", [
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", (1, 7)),
    ("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e81"
     "1ccb4d8d3b\n", (2, 1)),
    ("2.2", (2, 2)),
])
def test_version_from_containerd_output(text, expected):
    version = parse_version(text, "containerd --version")
    assert (version.major, version.minor) == expected
    assert version.config_version == (3 if expected[0] == 2 else 2)


@pytest.mark.parametrize("text", ["1.6.33", "3.0", "containerd dev"])
def test_unsupported_versions_are_one_line(text):
    with pytest.raises(InvalidInput, match="containerd"):
        parse_version(text, "--containerd-version")


def test_write_dry_run_and_idempotent_rewrite(capsys, tmp_path):
    dropin = tmp_path / "conf.d" / "nri-sla.toml"
    main_config = tmp_path / "config.toml"
    main_config.write_text(f'version = 3\nimports = ["{tmp_path}/conf.d/*.toml"]\n')
    common = ("--containerd-version", "2.2", "--main-config", str(main_config),
              "--base-runtime-spec", str(tmp_path / "absent.json"))
    # dry run against nothing: every line added, nothing written
    status, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run")
    assert status == EXIT_OK and not dropin.exists()
    assert out.startswith(f"--- /dev/null\n+++ {dropin}\n")
    assert "+version = 3\n" in out
    status, out, err = run(capsys, *common, "--write", str(dropin))
    assert status == EXIT_OK and out.startswith(f"wrote {dropin}")
    assert "does not import" not in err
    assert tomllib.loads(dropin.read_text())["version"] == 3
    assert oct(dropin.stat().st_mode & 0o777) == "0o644"
    before = os.stat(dropin)
    status, out, _ = run(capsys, *common, "--write", str(dropin))
    assert out == f"{dropin}: unchanged\n"
    assert os.stat(dropin).st_ino == before.st_ino
    assert os.stat(dropin).st_mtime_ns == before.st_mtime_ns
    # a changed setting: the dry run shows exactly that change
    _, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run", "--fail-closed")
    added = [line for line in out.splitlines() if line.startswith("+") and line[1:2] != "+"]
    removed = [line for line in out.splitlines() if line.startswith("-")
               and line[1:2] != "-"]
    assert removed == [] and '+  required_plugins = ["nri-sla"]' in added
    _, out, _ = run(capsys, *common, "--write", str(dropin), "--dry-run")
    assert out == f"{dropin}: no change\n"


def test_never_overwrites_a_foreign_file(capsys, tmp_path):
    dropin = tmp_path / "nri-sla.toml"
    dropin.write_text("version = 3\n# the operator's own\n")
    status, out, err = run(capsys, "--containerd-version", "2.2", "--write", str(dropin))
    assert status == EXIT_INVALID and out == ""
    assert err.splitlines()[-1] == (f"nri-sla containerd-config: {dropin} exists and was "
                                    f"not written by nri-sla: move it away or give another "
                                    f"--write path")
    assert dropin.read_text() == "version = 3\n# the operator's own\n"


def test_says_when_containerd_would_not_import_it(capsys, tmp_path):
    main_config = tmp_path / "config.toml"
    main_config.write_text('version = 2\nimports = ["/etc/containerd/other.toml"]\n')
    dropin = tmp_path / "conf.d" / "nri-sla.toml"
    status, _, err = run(capsys, "--containerd-version", "1.7", "--write", str(dropin),
                         "--main-config", str(main_config))
    assert status == EXIT_OK
    assert f"{main_config} does not import {dropin}: add imports = " \
           f"[\"{tmp_path}/conf.d/*.toml\"]" in err


def test_version_value_is_plain():
    assert str(ContainerdVersion(2, 2)) == "2.2"
    assert ContainerdVersion(2, 2).has_validator and not ContainerdVersion(2, 1).has_validator


def test_without_containerd_or_its_version_is_unavailable(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no containerd to ask
    status, out, err = run(capsys)
    assert (status, out) == (EXIT_UNAVAILABLE, "")
    assert err == "nri-sla containerd-config: cannot run `containerd --version`: give " \
                  "--containerd-version\n"


def test_an_unwritable_path_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, out, err = run(capsys, "--containerd-version", "2.2", "--write",
                           str(blocker / "nri-sla.toml"))
    assert status == EXIT_INTERNAL and out == ""
    assert err.splitlines()[-1].startswith(f"nri-sla containerd-config: cannot write "
                                           f"{blocker}/nri-sla.toml: ")
