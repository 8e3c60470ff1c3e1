"""The e2e harness's own pieces, checked without containerd (these run everywhere)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

BUSYBOX = Path("/bin/busybox")


def _blobs(archive: Path) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(archive) as t:
        index = json.load(t.extractfile("index.json"))
        blobs = {f"sha256:{m.name.rsplit('/', 1)[1]}": t.extractfile(m).read()
                 for m in t.getmembers() if m.name.startswith("blobs/sha256/") and m.isfile()}
    return index, blobs


def test_image_archive_is_a_consistent_oci_layout(e2e_image_builder, tmp_path):
    if not BUSYBOX.exists() or not e2e_image_builder.is_static_elf(BUSYBOX):
        pytest.skip("needs a static /bin/busybox (apt-get install busybox-static)")
    archive = e2e_image_builder.build_image_archive(tmp_path / "img.tar", BUSYBOX, "x.io/bb:7")
    index, blobs = _blobs(archive.path)
    for digest, data in blobs.items():  # every blob is named by its content
        assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "x.io/bb:7"
    assert entry["digest"] == archive.manifest_digest
    manifest = json.loads(blobs[entry["digest"]])
    config = json.loads(blobs[manifest["config"]["digest"]])
    (layer,) = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]  # uncompressed layer
    assert config["config"]["Entrypoint"] == ["/bin/sleep", "infinity"]
    with tarfile.open(fileobj=io.BytesIO(blobs[layer["digest"]])) as t:
        names = {m.name: m for m in t.getmembers()}
    assert names["bin/busybox"].size == BUSYBOX.stat().st_size
    assert names["bin/sleep"].issym() and names["bin/sleep"].linkname == "busybox"


def test_dynamic_binary_is_refused_with_a_hint(e2e_image_builder, tmp_path):
    dynamic = Path("/bin/sh").resolve()
    assert not e2e_image_builder.is_static_elf(dynamic)
    with pytest.raises(e2e_image_builder.ImageBuildError, match="busybox-static"):
        e2e_image_builder.build_image_archive(tmp_path / "img.tar", dynamic)


@pytest.mark.parametrize("major", [1, 2])
def test_containerd_config_enables_nri_on_private_paths(e2e_config_module, major):
    base, runc = Path("/tmp/nrie2e-x"), Path("/opt/runc")
    text = e2e_config_module.render_config(major, base, runc, "img:1", "amd64")
    cfg = tomllib.loads(text)
    plugins = cfg["plugins"]
    nri = plugins["io.containerd.nri.v1.nri"]
    assert (nri["disable"], nri["socket_path"]) == (False, f"{base}/nri.sock")
    assert cfg["grpc"]["address"] == f"{base}/containerd.sock"
    assert (cfg["root"], cfg["state"]) == (f"{base}/root", f"{base}/state")
    if major == 1:
        assert cfg["version"] == 2
        cri = plugins["io.containerd.grpc.v1.cri"]
        assert cri["sandbox_image"] == "img:1"
        runtimes = cri["containerd"]["runtimes"]
    else:
        assert cfg["version"] == 3
        cri = plugins["io.containerd.cri.v1.runtime"]
        assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "img:1"
        runtimes = cri["containerd"]["runtimes"]
        unpack = plugins["io.containerd.transfer.v1.local"]["unpack_config"]
        assert unpack == [{"platform": "linux/amd64", "snapshotter": "native"}]
    assert cri["restrict_oom_score_adj"] is True
    # CDI on (1.7 defaults to off) and resolved only from the cluster's own spec directory
    assert (cri["enable_cdi"], cri["cdi_spec_dirs"]) == (True, [f"{base}/cdi"])
    opts = runtimes["runc"]["options"]
    assert (opts["BinaryName"], opts["SystemdCgroup"]) == (str(runc), False)
    # the shipped config's NRI timeouts and pass-through, not settings of the harness's own
    shipped = tomllib.loads(e2e_config_module.SHIPPED[major].read_text())
    assert nri["plugin_request_timeout"] == shipped["plugins"]["io.containerd.nri.v1.nri"][
        "plugin_request_timeout"]
    assert "sla.nri.io/applied" not in str(runtimes["runc"]["pod_annotations"])
    assert runtimes["runc"]["pod_annotations"] == e2e_config_module.shipped_settings(major)[1]
    assert opts["Root"] == f"{base}/runc"


def test_histogram_figures_name_the_bucket_of_each_quantile():
    from e2e_metrics import histogram_quantile, per_bucket  # conftest.py: harness on path

    inf = float("inf")
    cumulative = [(0.001, 5.0), (0.0025, 150.0), (0.005, 190.0), (0.01, 200.0), (inf, 200.0)]
    assert histogram_quantile(0.5, cumulative) == (0.001, 0.0025)
    assert histogram_quantile(0.99, cumulative) == (0.005, 0.01)
    assert histogram_quantile(0.01, cumulative) == (0.0, 0.001)
    assert per_bucket(cumulative) == [(0.001, 5.0), (0.0025, 145.0), (0.005, 40.0),
                                      (0.01, 10.0)]
    with pytest.raises(ValueError):
        histogram_quantile(0.5, [(inf, 0.0)])


def test_rollout_pods_each_ask_their_own_sla():
    from e2e_rollout import Expected, percentile, sla_pods

    pods, expected = sla_pods(20, "r", gpu_every=8)
    assert [name for name, _ in pods] == sorted(expected) and len(expected) == 20
    assert expected["r001"] == Expected(10000, 100000, 65 << 20, 0)
    assert pods[1][1]["sla.nri.io/pod"] == (
        "cpu: {limit: 100m, period: 100ms}\nmemory: {max: 65Mi}\n")
    assert [n for n, e in expected.items() if e.gpus] == ["r000", "r008", "r016"]
    assert len({(e.cpu_quota, e.memory_limit) for e in expected.values()}) == 20
    assert (percentile([3.0, 1.0, 2.0], 50), percentile([1.0, 2.0, 3.0], 99)) == (2.0, 3.0)
