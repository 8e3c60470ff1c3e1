"""packaging/nri: the pre-launched plugin wrapper and its conf.d file.

containerd starts /opt/nri/plugins/50-nri-sla with a connected socket on fd 3, only the
NRI_PLUGIN_* variables and no PATH. The wrapper must exec nri-sla by full path, in the
same process, keeping fd 3 and the variables.
"""

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys

import pytest
import yaml

from nri_plugin.simulated.runtime import RuntimeSimulator

NRI_ENV = {"NRI_PLUGIN_NAME": "nri-sla", "NRI_PLUGIN_IDX": "50", "NRI_PLUGIN_SOCKET": "3"}

FAKE = """#!{python} -I
# stands in for /usr/bin/nri-sla: report argv, env, pid and fd 3 back over fd 3
import json, os, socket
sock = socket.socket(fileno=3)
sock.sendall(json.dumps({{"argv": os.sys.argv, "env": dict(os.environ),
                          "pid": os.getpid()}}).encode())
sock.close()
"""


@pytest.fixture
def wrapper_with_fake(tmp_path, pk):
    fake = tmp_path / "nri-sla"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    original = (pk.PACKAGING / "nri" / "50-nri-sla").read_text()
    assert original.count("NRI_SLA=/usr/bin/nri-sla\n") == 1
    wrapper = tmp_path / "50-nri-sla"
    wrapper.write_text(original.replace("NRI_SLA=/usr/bin/nri-sla", f"NRI_SLA={fake}"))
    wrapper.chmod(0o755)
    return wrapper


def test_wrapper_is_executable_and_uses_full_paths(pk):
    path = pk.PACKAGING / "nri" / "50-nri-sla"
    assert path.stat().st_mode & stat.S_IXUSR
    text = path.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert 'exec "$NRI_SLA" run --config /etc/nri-sla/config.yaml' in text
    # containerd derives name and index from the file name: NN-name, two digits
    assert path.name.split("-", 1) == ["50", "nri-sla"]


def test_wrapper_execs_nri_sla_with_fd3_in_empty_env(wrapper_with_fake):
    ours, theirs = socket.socketpair()
    with ours, theirs:
        proc = subprocess.Popen(
            [str(wrapper_with_fake)],
            env=dict(NRI_ENV),
            close_fds=False,
            preexec_fn=lambda: os.dup2(theirs.fileno(), 3),
        )
        theirs.close()
        ours.settimeout(20)
        data = b""
        while chunk := ours.recv(65536):
            data += chunk
        assert proc.wait(20) == 0
    report = json.loads(data)
    assert report["argv"][1:] == ["run", "--config", "/etc/nri-sla/config.yaml"]
    assert report["pid"] == proc.pid, "wrapper must exec, not fork, nri-sla"
    env = report["env"]
    for key, value in NRI_ENV.items():
        assert env[key] == value
    assert env["PATH"].split(":")[:2] == ["/usr/sbin", "/usr/bin"]
    assert set(env) - set(NRI_ENV) - {"PATH", "PWD", "SHLVL", "_", "LC_CTYPE"} == set()


def test_wrapper_fails_loudly_when_nri_sla_missing(tmp_path, pk):
    text = (pk.PACKAGING / "nri" / "50-nri-sla").read_text()
    wrapper = tmp_path / "50-nri-sla"
    wrapper.write_text(text.replace("/usr/bin/nri-sla", str(tmp_path / "absent")))
    wrapper.chmod(0o755)
    res = subprocess.run(
        [str(wrapper)], env=dict(NRI_ENV), capture_output=True, text=True, timeout=20
    )
    assert res.returncode == 127 and "absent" in res.stderr


def test_conf_d_file_is_yaml_naming_the_config(pk):
    conf = pk.PACKAGING / "nri" / "50-nri-sla.conf"
    data = yaml.safe_load(conf.read_text())
    assert data == {"config-file": "/etc/nri-sla/config.yaml"}
    # containerd looks up <idx>-<name>.conf for the plugin 50-nri-sla
    assert conf.name == "50-nri-sla.conf"


def test_prelaunched_nri_sla_registers_and_reports_ready(tmp_path, pk):
    """The whole route: containerd (the simulator) launches the wrapper with fd 3 and
    nothing else; the real `nri-sla run` registers over fd 3 and /readyz turns 200."""
    if not pk.VENV_NRI_SLA.exists():
        pytest.skip(f"{pk.VENV_NRI_SLA} missing: install the project (pip install -e .)")
    with socket.socket() as probe:  # a free port for the metrics server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "config.yaml"
    # state-dir: the record key goes under tmp_path, not the host's /var/lib/nri-sla
    config.write_text(
        f'metrics:\n  address: "127.0.0.1:{port}"\nlog:\n  format: json\n'
        f"state-dir: {tmp_path / 'state'}\n"
    )
    text = (pk.PACKAGING / "nri" / "50-nri-sla").read_text()
    wrapper = tmp_path / "50-nri-sla"
    wrapper.write_text(
        text.replace("NRI_SLA=/usr/bin/nri-sla", f"NRI_SLA={pk.VENV_NRI_SLA}").replace(
            "/etc/nri-sla/config.yaml", str(config)
        )
    )
    wrapper.chmod(0o755)

    async def main() -> tuple[int, bytes]:
        ours, theirs = socket.socketpair()
        sim = RuntimeSimulator(str(tmp_path / "unused.sock"))
        await sim.attach(theirs)
        fd = ours.fileno()
        proc = await asyncio.create_subprocess_exec(
            str(wrapper),
            env=dict(NRI_ENV),
            close_fds=False,
            preexec_fn=lambda: os.dup2(fd, 3),
            stderr=asyncio.subprocess.PIPE,
        )
        ours.close()
        try:
            session = await sim.accept(timeout=30)
            assert (session.name, session.idx) == ("nri-sla", "50")
            assert await pk.wait_ready(port) == 200
            session.drop("containerd stops the plugin")
            rc = await asyncio.wait_for(proc.wait(), 20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await sim.close()
        return rc, await proc.stderr.read()

    rc, stderr = asyncio.run(main())
    assert rc == 0, stderr.decode()[-2000:]
    # The installed project serves NRI on uvloop (a dependency), not asyncio's own loop.
    assert b"event loop: uvloop" in stderr, stderr.decode()[-2000:]
