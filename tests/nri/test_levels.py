"""The runtime's NRI level when Configure does not carry it (nri_plugin.nri.levels)."""

import pytest

from nri_plugin.nri import events as ev
from nri_plugin.nri.levels import RUNTIME_NRI, NriLevel, nri_level


@pytest.mark.parametrize(
    ("name", "release", "version"),
    [
        # CRI-O: the vendored github.com/containerd/nri of each release tag's go.mod
        ("cri-o", "1.36.3", "v0.11.0"),
        ("cri-o", "1.35.0", "v0.11.0"),
        ("cri-o", "1.34.11", "v0.10.0"),
        ("cri-o", "1.33.4", "v0.9.0"),  # a v0.10 pre-release without validation: v0.9 events
        ("cri-o", "1.31.2", "v0.6.1"),
        ("cri-o", "1.26.0", "v0.2.0"),
        ("cri-o", "1.37.0", "v0.11.0"),  # newer than the table and sends none: at least v0.11
        # containerd, as it writes its version (a source build adds +unknown)
        ("containerd", "1.7.34+unknown", "v0.8.0"),
        ("containerd", "v2.1.4", "v0.8.0"),
        ("containerd", "v2.2.0", "v0.10.0"),
        ("containerd", "2.2.1", "v0.11.0"),
        ("containerd", "2.3.4+unknown", "v0.12.0"),
        ("CRI-O", "1.36.3", "v0.11.0"),
    ],
)
def test_release_tells_the_version(name, release, version):
    level = nri_level("", name, release)
    assert level == NriLevel(version, f"{name} {release} (release table)")


@pytest.mark.parametrize(
    ("name", "release"),
    [("cri-o", ""), ("cri-o", "1.25.9"), ("cri-o", "main"), ("podman", "5.0.0"), ("", "")],
)
def test_unknown_stays_unversioned(name, release):
    level = nri_level("", name, release)
    assert level == NriLevel("", "unknown")
    assert level.describe() == "unversioned (older than v0.12)"
    assert ev.known_mask(level.version) == ev.LEGACY_MASK


def test_a_sent_version_wins_over_the_table():
    assert nri_level("v0.12.1", "cri-o", "1.36.3") == NriLevel("v0.12.1", "sent")
    # not a version (a build without module info): the table
    assert nri_level("unknown", "containerd", "2.3.4").version == "v0.12.0"


def test_events_follow_the_level():
    """CRI-O 1.36 sends no version but knows events 12-14: subscribing to them is safe;
    CRI-O 1.33 and containerd 2.1 do not know 14 (13): clipped to 1-11."""
    assert ev.known_mask(nri_level("", "cri-o", "1.36.3").version) == ev.FULL_MASK
    assert ev.known_mask(nri_level("", "containerd", "2.2.0").version) == ev.FULL_MASK
    assert ev.known_mask(nri_level("", "cri-o", "1.33.0").version) == ev.LEGACY_MASK
    assert ev.known_mask(nri_level("", "containerd", "2.1.9").version) == ev.LEGACY_MASK


def test_table_rows_ascend():
    for rows in RUNTIME_NRI.values():
        releases = [first for first, _ in rows]
        versions = [ev.parse_version(v) for _, v in rows]
        assert releases == sorted(releases) and versions == sorted(versions)
