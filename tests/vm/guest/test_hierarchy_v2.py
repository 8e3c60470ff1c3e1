"""cgroup v2 hierarchy rules that decide whether a container's cgroup file can be written
at all: controllers must be delegated by every ancestor (subtree_control), and a child's
cpuset is only effective within its parent's.
"""

import errno

import pytest


@pytest.fixture
def child(scratch_cgroup):
    path = scratch_cgroup.path / "ctr"
    path.mkdir()
    return type(scratch_cgroup)(path)


def test_interface_files_exist_only_for_delegated_controllers(scratch_cgroup, child):
    # Like a pod cgroup whose parent did not enable cpu/io: the container's cgroup then has
    # no cpu.max / io.max to write (a writer sees ENOENT, not EACCES).
    assert scratch_cgroup.read("cgroup.subtree_control") == ""
    assert not (child.path / "cpu.max").exists()
    assert not (child.path / "io.max").exists()
    scratch_cgroup.write("cgroup.subtree_control", "+cpu +io")
    assert (child.path / "cpu.max").exists()
    assert (child.path / "io.max").exists()
    assert not (child.path / "memory.max").exists()
    assert set(child.read("cgroup.controllers").split()) == {"cpu", "io"}


def test_controllers_cannot_be_enabled_over_a_populated_cgroup(scratch_cgroup, child):
    # "No internal processes": a cgroup holding processes cannot delegate to children.
    proc = scratch_cgroup.spawn(["sleep", "30"])
    try:
        with pytest.raises(OSError) as exc:
            scratch_cgroup.write("cgroup.subtree_control", "+memory")
        assert exc.value.errno == errno.EBUSY
    finally:
        proc.kill()
        proc.wait()


def test_child_cpuset_is_clipped_to_the_parent(scratch_cgroup, child):
    scratch_cgroup.write("cgroup.subtree_control", "+cpuset")
    scratch_cgroup.write("cpuset.cpus", "0")
    # The write is accepted and read back as written, but not effective: read-back of a
    # cpuset must look at cpuset.cpus.effective.
    child.write("cpuset.cpus", "1")
    assert child.read("cpuset.cpus") == "1"
    assert child.read("cpuset.cpus.effective") == "0"
    child.write("cpuset.cpus", "0-1")
    assert child.read("cpuset.cpus.effective") == "0"


def test_memory_limits_of_ancestors_still_apply(scratch_cgroup, child):
    scratch_cgroup.write("cgroup.subtree_control", "+memory")
    scratch_cgroup.write("memory.max", str(32 << 20))
    child.write("memory.max", "max")  # the child's own file says unlimited...
    proc = child.spawn(["python3", "-S", "-c", "b = b'x' * (96 << 20)"])
    proc.communicate(timeout=60)
    assert proc.returncode == -9  # ...but the parent's limit kills it
    assert scratch_cgroup.keyed("memory.events")["oom_kill"] >= 1
