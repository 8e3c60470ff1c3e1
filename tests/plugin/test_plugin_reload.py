"""SIGHUP to a running `nri-sla run` process, registered with the runtime simulator.

A config that validates: its live keys apply to the next pod (here a permission), the
keys that need a restart are named and kept, in one log line. A config that does not
validate: one error line saying why, the old policy stays, the plugin stays registered.
SIGHUP never ends the plugin; SIGTERM then ends it cleanly (exit 0, status socket gone).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from nri_plugin import __version__
from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.runtime import RuntimeSimulator
from tests.support.cgroups import make_v1_tree
from tests.support.fault_helpers import APPLIED, Kubelet
from tests.support.plugin_process import PluginProcess, free_port, log_lines, until

EXCLUSIVE = "cpu: {exclusive: 2}"
CONFIG = """\
state-dir: {dir}/state
permissions: {{exclusive-cpus: {allowed}, exceed-runtime-limits: ["*"]}}
pod-caps: {{exclusive-cpus: "100%"}}
nri: {{socket: {dir}/nri.sock, reconnect-max-seconds: {reconnect}}}
status: {{socket: {dir}/status.sock}}
metrics: {{address: "127.0.0.1:{port}"}}
log: {{format: json}}
"""


def write(path: Path, port: int, allowed: str, reconnect: float) -> None:
    path.write_text(CONFIG.format(dir=path.parent, allowed=allowed, port=port, reconnect=reconnect))


def test_sighup_applies_a_good_config_and_keeps_the_old_on_a_bad_one(tmp_path):
    port = free_port()
    config = tmp_path / "config.yaml"
    write(config, port, "[]", 0.5)
    cgroups = make_v1_tree(tmp_path / "cgroup")

    async def scenario():
        sim = await RuntimeSimulator(str(tmp_path / "nri.sock")).start()
        plugin = PluginProcess(config, tmp_path / "plugin.log", port)
        try:
            await sim.accept(timeout=20)
            kubelet = Kubelet(Cri(sim), cgroups)
            await kubelet.pod("before", EXCLUSIVE)

            write(config, port, '["*"]', 2)  # a permission (live), the back-off (restart)
            plugin.proc.send_signal(signal.SIGHUP)
            reloaded = await until(
                lambda: [r for r in plugin.lines() if r["msg"].startswith("config reload")],
                what="the reload line",
            )
            await kubelet.pod("after", EXCLUSIVE)

            config.write_text(config.read_text() + "enforcement: sometimes\n")
            plugin.proc.send_signal(signal.SIGHUP)
            refused = await until(
                lambda: [r for r in plugin.lines() if r["msg"].startswith("config reload refused")],
                what="the refusal line",
            )
            await asyncio.sleep(0.3)  # a second line, if any, would be there by now
            lines = [r for r in plugin.lines() if r["msg"].startswith("config reload")]
            registered = plugin.metric("nri_sla_registered"), plugin.get("/readyz")[0]
            await kubelet.pod("kept", EXCLUSIVE)
            alive = plugin.proc.poll()
            plugin.proc.terminate()
            code = plugin.proc.wait(10)
            return kubelet, sim, reloaded, refused, lines, registered, alive, code
        finally:
            plugin.stop()
            await sim.close()

    kubelet, sim, reloaded, refused, lines, registered, alive, code = asyncio.run(
        asyncio.wait_for(scenario(), 90)
    )
    first = log_lines(tmp_path / "plugin.log")[0]
    assert first["msg"] == f"nri-sla {__version__} starting (config {config})"
    assert "before" in kubelet.refused and "exclusive-cpus" in kubelet.refused["before"]
    assert reloaded == [lines[0]] and reloaded[0]["level"] == "info"
    assert reloaded[0]["msg"] == (
        f"config reloaded from {config}: applied "
        "permissions.exclusive-cpus; needs a restart (not applied): "
        "nri.reconnect-max-seconds"
    )
    # The new pod got the new permission: created, with the record of its exclusive CPUs.
    assert "after" not in kubelet.refused
    after = [
        c for c in sim.state.containers.values() if sim.state.pods[c.pod_sandbox_id].name == "after"
    ]
    assert len(after) == 1 and APPLIED in after[0].annotations
    # The bad config: one error line naming the key, the old policy kept, still registered.
    assert len(lines) == 2 and refused == [lines[1]] and refused[0]["level"] == "error"
    assert refused[0]["msg"].startswith(
        f"config reload refused, keeping the config in use: {config}: enforcement "
    )
    assert registered == (1.0, 200)
    assert "kept" not in kubelet.refused
    assert alive is None and code == 0
    assert not (tmp_path / "status.sock").exists()
