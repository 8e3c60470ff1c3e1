"""The record key file: created once, atomically, private; anything else is refused."""

from __future__ import annotations

import multiprocessing
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nri_plugin.core.errors import RecordKeyError
from nri_plugin.core.recordkey import KEY_BYTES, key_path, load_key, load_or_create_key


def test_created_at_first_start_then_the_same_key(tmp_path):
    state = tmp_path / "var" / "lib" / "nri-sla"
    key = load_or_create_key(str(state))
    st = os.stat(key_path(str(state)))
    assert len(key) == KEY_BYTES and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert load_or_create_key(str(state)) == key == load_key(str(state))
    assert [p.name for p in state.iterdir()] == ["record.key"]  # no temporary left behind
    assert load_or_create_key(str(tmp_path / "other")) != key  # random per node


def _race(state: str) -> bytes:
    return load_or_create_key(state)


def test_plugins_starting_together_agree_on_one_key(tmp_path):
    state = str(tmp_path / "state")
    with multiprocessing.get_context("fork").Pool(4) as pool:
        keys = pool.map(_race, [state] * 16)
    assert len(set(keys)) == 1 and keys[0] == load_key(state)


def test_the_hook_never_creates_a_key(tmp_path):
    with pytest.raises(RecordKeyError, match="no record key"):
        load_key(str(tmp_path))
    assert not any(tmp_path.iterdir())


def _planted(state: Path, kind: str) -> None:
    state.mkdir(mode=0o700)
    path = state / "record.key"
    good = state / "elsewhere"
    good.write_bytes(b"k" * KEY_BYTES)
    good.chmod(0o600)
    if kind == "symlink":
        path.symlink_to(good)
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(b"k" * (KEY_BYTES - 1 if kind == "short" else KEY_BYTES))
        path.chmod(
            {"group-readable": 0o640, "world-readable": 0o604, "group-writable": 0o620}.get(
                kind, 0o600
            )
        )
        if kind == "foreign owner":
            os.chown(path, 65534, 65534)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("symlink", "is a symbolic link"),
        ("directory", "must be a regular file"),
        ("fifo", "must be a regular file"),
        ("short", f"must be {KEY_BYTES} bytes, found {KEY_BYTES - 1}"),
        ("group-readable", "readable by its owner only (mode 0640"),
        ("world-readable", "readable by its owner only (mode 0604"),
        ("group-writable", "readable by its owner only (mode 0620"),
        ("foreign owner", "owned by uid 65534"),
    ],
)
def test_an_untrustworthy_key_file_is_refused_not_replaced(tmp_path, kind, says):
    if kind == "foreign owner" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    state = tmp_path / "state"
    _planted(state, kind)
    before = os.lstat(state / "record.key")
    for load in (load_key, load_or_create_key):
        with pytest.raises(RecordKeyError) as caught:
            load(str(state))
        assert says in str(caught.value) and str(state / "record.key") in str(caught.value)
    after = os.lstat(state / "record.key")
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_nri_sla_run_refuses_to_start_with_a_planted_key(tmp_path):
    state = tmp_path / "state"
    _planted(state, "symlink")
    config = tmp_path / "config.yaml"
    config.write_text(f"state-dir: {state}\nmetrics: {{address: ''}}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nri_plugin.cli",
            "run",
            "--config",
            str(config),
            "--socket",
            str(tmp_path / "none.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The operator's node state: exit status 2, the one its class gives.
    assert proc.returncode == RecordKeyError("x").exit_status == 2
    assert f"nri-sla run: {state / 'record.key'}: is a symbolic link" in proc.stderr
