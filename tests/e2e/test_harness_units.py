"""The e2e harness's own pieces, checked without containerd (these run everywhere)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.e2e import e2e_config, e2e_image

BUSYBOX = Path("/bin/busybox")


def _blobs(archive: Path) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(archive) as t:
        index = json.load(t.extractfile("index.json"))
        blobs = {
            f"sha256:{m.name.rsplit('/', 1)[1]}": t.extractfile(m).read()
            for m in t.getmembers()
            if m.name.startswith("blobs/sha256/") and m.isfile()
        }
    return index, blobs


def test_image_archive_is_a_consistent_oci_layout(tmp_path):
    if not BUSYBOX.exists() or not e2e_image.is_static_elf(BUSYBOX):
        pytest.skip("needs a static /bin/busybox (apt-get install busybox-static)")
    archive = e2e_image.build_image_archive(tmp_path / "img.tar", BUSYBOX, "x.io/bb:7")
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


def test_dynamic_binary_is_refused_with_a_hint(tmp_path):
    dynamic = Path("/bin/sh").resolve()
    assert not e2e_image.is_static_elf(dynamic)
    with pytest.raises(e2e_image.ImageBuildError, match="busybox-static"):
        e2e_image.build_image_archive(tmp_path / "img.tar", dynamic)


@pytest.mark.parametrize("major", [1, 2])
def test_containerd_config_enables_nri_on_private_paths(major):
    base, runc = Path("/tmp/nrie2e-x"), Path("/opt/runc")
    text = e2e_config.render_config(major, base, runc, "img:1", "amd64")
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
    shipped = tomllib.loads(e2e_config.SHIPPED[major].read_text())
    assert (
        nri["plugin_request_timeout"]
        == shipped["plugins"]["io.containerd.nri.v1.nri"]["plugin_request_timeout"]
    )
    assert "sla.nri.io/applied" not in str(runtimes["runc"]["pod_annotations"])
    assert runtimes["runc"]["pod_annotations"] == e2e_config.shipped_settings(major)[1]
    assert opts["Root"] == f"{base}/runc"


def test_histogram_figures_name_the_bucket_of_each_quantile():
    from tests.e2e.e2e_metrics import histogram_quantile, per_bucket

    inf = float("inf")
    cumulative = [(0.001, 5.0), (0.0025, 150.0), (0.005, 190.0), (0.01, 200.0), (inf, 200.0)]
    assert histogram_quantile(0.5, cumulative) == (0.001, 0.0025)
    assert histogram_quantile(0.99, cumulative) == (0.005, 0.01)
    assert histogram_quantile(0.01, cumulative) == (0.0, 0.001)
    assert per_bucket(cumulative) == [(0.001, 5.0), (0.0025, 145.0), (0.005, 40.0), (0.01, 10.0)]
    with pytest.raises(ValueError):
        histogram_quantile(0.5, [(inf, 0.0)])


def test_rollout_pods_each_ask_their_own_sla():
    from tests.e2e.e2e_rollout import Expected, percentile, sla_pods

    pods, expected = sla_pods(20, "r", gpu_every=8)
    assert [name for name, _ in pods] == sorted(expected) and len(expected) == 20
    assert expected["r001"] == Expected(10000, 100000, 65 << 20, 0)
    assert pods[1][1]["sla.nri.io/pod"] == (
        "cpu: {limit: 100m, period: 100ms}\nmemory: {max: 65Mi}\n"
    )
    assert [n for n, e in expected.items() if e.gpus] == ["r000", "r008", "r016"]
    assert len({(e.cpu_quota, e.memory_limit) for e in expected.values()}) == 20
    assert (percentile([3.0, 1.0, 2.0], 50), percentile([1.0, 2.0, 3.0], 99)) == (2.0, 3.0)


def test_gpu_access_is_read_as_runc_applies_device_rules():
    from tests.e2e.e2e_gpu import rule_allowed, spec_gpu_nodes

    gpus = frozenset(range(8))
    node = {"type": "c", "major": 195}
    spec = {
        "linux": {
            "devices": [
                node | {"minor": 4},
                node | {"minor": 255},
                {"type": "c", "major": 1, "minor": 3},
            ],
            "resources": {
                "devices": [
                    {"allow": False, "access": "rwm"},  # containerd's deny-all first
                    {"allow": True, "type": "c", "major": 195, "minor": 4, "access": "rw"},
                    {"allow": True, "type": "c", "major": 195, "access": "m"},  # mknod only
                    {"allow": True, "type": "c", "major": 195, "minor": 5, "access": "rw"},
                    {"allow": False, "type": "c", "major": 195, "minor": 5, "access": "rwm"},
                ]
            },
        }
    }
    assert spec_gpu_nodes(spec) == {4}  # nvidiactl (255) and /dev/null are no GPUs
    assert rule_allowed(spec, gpus) == {4}  # the last matching rule decides GPU 5
    spec["linux"]["resources"]["devices"].append({"allow": True, "access": "rwm"})
    assert rule_allowed(spec, gpus) == gpus  # a wildcard opens every GPU


def test_kubelet_books_grant_only_free_gpus():
    from tests.e2e.e2e_gpu import GPUS, KINDS, FakeGpus, GpuBooks, NoGpuLeft

    fake = FakeGpus(
        Path("/dev-x"), Path("/cdi-x"), Path("/inv-x"), GPUS, (frozenset({0}), frozenset({1}))
    )
    books = GpuBooks(fake)
    first = books.allocate("a", 6)
    assert first["CDI_devices"][0] == {"name": f"{KINDS[1]}={GPUS[0].uuid}"}  # by UUID
    assert [d["name"] for d in first["CDI_devices"][1:]] == [f"{KINDS[1]}={i}" for i in range(1, 6)]
    assert books.free() == [6, 7]
    with pytest.raises(NoGpuLeft, match=r"b: 3 GPUs asked, free: \[6, 7\]"):
        books.allocate("b", 3)
    books.release("a")
    assert books.free() == list(range(8))
    spec = fake.cdi_spec(KINDS[0])
    names = [d["name"] for d in spec["devices"]]
    assert names == [n for g in GPUS for n in (str(g.index), g.uuid)]
    assert spec["devices"][9]["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/nvidia4",
            "hostPath": "/dev-x/nvidia4",
            "type": "c",
            "major": 195,
            "minor": 4,
            "permissions": "rw",
        }
    ]


def test_archive_registry_serves_the_image_as_a_registry_does(tmp_path):
    """What CRI-O's pull asks of the registry (API v2): the manifest by tag (a digest
    header that is the body's sha256), the same by digest, and every blob it names."""
    import urllib.request

    from tests.e2e.e2e_crio import ArchiveRegistry

    if not e2e_image.is_static_elf(BUSYBOX):
        pytest.skip("needs a static /bin/busybox (apt-get install busybox-static)")
    archive = e2e_image.build_image_archive(tmp_path / "img.tar", BUSYBOX)

    def get(url: str):
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read(), resp.headers

    with ArchiveRegistry(archive.path, "nri-e2e/busybox", "1") as reg:
        root = f"http://{reg.address}/v2/"
        assert get(root)[0] == b"{}"
        body, headers = get(root + "nri-e2e/busybox/manifests/1")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        assert headers["Docker-Content-Digest"] == digest == archive.manifest_digest
        manifest = json.loads(body)
        assert headers["Content-Type"] == manifest["mediaType"]
        assert get(root + f"nri-e2e/busybox/manifests/{digest}")[0] == body
        for blob in [manifest["config"], *manifest["layers"]]:
            data, _ = get(root + f"nri-e2e/busybox/blobs/{blob['digest']}")
            assert "sha256:" + hashlib.sha256(data).hexdigest() == blob["digest"]
        with pytest.raises(urllib.error.HTTPError, match="404"):
            get(root + "other/manifests/1")
        assert reg.image == f"{reg.address}/nri-e2e/busybox:1"
