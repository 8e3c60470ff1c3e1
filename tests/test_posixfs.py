"""nri_plugin.posixfs gives os.path's results (the hook's cached run must not load os)."""

import os
from pathlib import Path

import pytest

from nri_plugin import posixfs

PATHS = [
    "",
    "/",
    "//",
    "///",
    "a",
    "a/",
    "/a",
    "/a/",
    "/a//b/./c/..",
    "a/../..",
    "../x",
    "/../x",
    "./",
    "//a//b",
    "/a/b/c.py",
    "a/b/",
    "/..",
]


@pytest.mark.parametrize("path", PATHS)
def test_lexical_rules_match_os_path(path):
    assert posixfs.dirname(path) == os.path.dirname(path)
    assert posixfs.basename(path) == os.path.basename(path)
    assert posixfs.normpath(path) == os.path.normpath(path)
    assert posixfs.abspath(path) == os.path.abspath(path)
    assert posixfs.isabs(path) == os.path.isabs(path)
    for other in ("b", "/b", "", "b/"):
        assert posixfs.join(path, other) == os.path.join(path, other)
        assert posixfs.join(path, other, "c") == os.path.join(path, other, "c")


def test_file_checks_and_realpath_match_os_path(tmp_path, monkeypatch):
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "f").write_text("x")
    (tmp_path / "to-d").symlink_to("d")
    (tmp_path / "d" / "up").symlink_to("..")
    (tmp_path / "abs").symlink_to(tmp_path / "d" / "e")
    (tmp_path / "chain").symlink_to("to-d/up/abs")
    (tmp_path / "dangling").symlink_to("nowhere/x")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    monkeypatch.chdir(tmp_path / "d")
    names = [
        "",
        "d",
        "f",
        "to-d",
        "to-d/e",
        "to-d/..",
        "to-d/up/to-d/e",
        "abs",
        "abs/..",
        "chain",
        "chain/../f",
        "dangling",
        "dangling/..",
        "missing/../f",
        "f/x",
        "loop1",
        "d/up/up/up",
    ]
    for name in names:
        for path in (str(tmp_path / name), name):
            assert posixfs.exists(path) == os.path.exists(path), path
            assert posixfs.isdir(path) == os.path.isdir(path), path
            assert posixfs.isfile(path) == os.path.isfile(path), path
            assert posixfs.islink(path) == os.path.islink(path), path
            if not name.startswith("loop"):
                assert posixfs.realpath(path) == os.path.realpath(path), path
    # A loop: unresolved from where the chain gets too long, and no endless loop.
    assert posixfs.realpath(str(tmp_path / "loop1")).startswith(str(tmp_path) + "/loop")
    assert not posixfs.exists("a\0b") and not posixfs.isdir("a\0b")


def test_getenv_and_makedirs(tmp_path, monkeypatch):
    monkeypatch.setenv("NRI_SLA_POSIXFS_TEST", "välue")
    assert posixfs.getenv("NRI_SLA_POSIXFS_TEST") == "välue"
    monkeypatch.delenv("NRI_SLA_POSIXFS_TEST")
    assert posixfs.getenv("NRI_SLA_POSIXFS_TEST") is None
    posixfs.makedirs(str(tmp_path / "x" / "y" / "z"), 0o755)
    posixfs.makedirs(str(tmp_path / "x" / "y" / "z"), 0o755)  # exists: fine
    assert (tmp_path / "x" / "y" / "z").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError):
        posixfs.makedirs(str(tmp_path / "file"))


@pytest.mark.parametrize("limit", [-1, 0, 1, 5, 1 << 16, (1 << 16) + 3, 1 << 20])
def test_reads_match_a_binary_files_read(tmp_path, limit):
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 1000)  # 256,000 bytes: several chunks
    with open(path, "rb") as fh:
        expected = fh.read(limit)
    assert posixfs.read_file(str(path), limit) == expected
    fd = os.open(path, os.O_RDONLY)
    try:
        assert posixfs.read_fd(fd, limit) == expected
    finally:
        os.close(fd)
    assert posixfs.read_file("/proc/self/mountinfo") == Path("/proc/self/mountinfo").read_bytes()
    with pytest.raises(FileNotFoundError):
        posixfs.read_file(str(tmp_path / "missing"))


@pytest.mark.parametrize("limit", [0, 5, 1 << 16])
def test_an_attribute_is_read_whole_in_one_read(tmp_path, limit):
    # sysfs and cgroupfs hand a small file whole at once; so does a plain file (the tests'
    # fake trees). The read is bounded all the same.
    path = tmp_path / "cpu.max"
    path.write_bytes(b"250000 100000\n")
    assert posixfs.read_attribute(str(path), limit) == b"250000 100000\n"[:limit]
    online = Path("/sys/devices/system/cpu/online")
    if online.exists():
        assert posixfs.read_attribute(str(online)) == online.read_bytes()
    with pytest.raises(FileNotFoundError):
        posixfs.read_attribute(str(tmp_path / "missing"))
