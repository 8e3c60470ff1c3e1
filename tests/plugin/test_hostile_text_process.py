"""Hostile SLA text through a real `nri-sla run` process and the runtime simulator: pods
whose annotations the former bounds let through (a 4 KB document of 2,000 values, 5,000
stray keys under the prefix) are refused with one line naming the bound, a refused
pod's second container gets the same answer, and typical pods are served between them,
each hostile create costing the plugin at most a few typical ones."""

from __future__ import annotations

import asyncio

from nri_plugin.simulated.cri import Cri
from nri_plugin.simulated.runtime import PluginCallError, RuntimeSimulator, make_container, make_pod
from nri_plugin.sla.parse import MAX_SLA_KEYS, MAX_VALUES
from tests.support.plugin_process import PluginProcess, free_port

POD = "sla.nri.io/pod"
TYPICAL = "cpu: {limit: 0.5}\nmemory: {max: 256Mi}"
CONFIG = """\
state-dir: {state}
nri: {{socket: {socket}, reconnect-max-seconds: 0.5}}
metrics: {{address: "127.0.0.1:{port}"}}
log: {{format: json}}
"""


def values(n: int) -> str:
    return f"cpu: {{limit: [{n}" + ",0" * 2000 + "]}\n"  # 4,016 bytes


def test_hostile_sla_text_is_refused_in_one_line_by_nri_sla_run(tmp_path):
    socket_path = tmp_path / "nri.sock"
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", socket=socket_path, port=port))
    pods = [
        ("typical-0", {POD: TYPICAL}, 1),
        ("values", {POD: values(1)}, 2),
        ("typical-1", {POD: TYPICAL.replace("256", "257")}, 1),
        ("strays", {f"sla.nri.io/x{n}": "" for n in range(5000)}, 2),
        ("typical-2", {POD: TYPICAL.replace("256", "258")}, 1),
    ]

    async def scenario():
        plugin = PluginProcess(config, tmp_path / "plugin.log", port)
        try:
            sim = await RuntimeSimulator(str(socket_path)).start()
            await sim.accept(timeout=20)
            cri = Cri(sim)
            answers: dict[str, list[str]] = {}
            for name, annotations, containers in pods:
                pod = make_pod(name, annotations=annotations)
                await cri.run_pod(pod)
                for n in range(containers):
                    try:
                        await cri.create_container(pod, make_container(pod, f"c{n}"))
                        answers.setdefault(name, []).append("created")
                    except PluginCallError as exc:
                        answers.setdefault(name, []).append(exc.message)
            created = 'nri_sla_request_seconds_{}{{event="CreateContainer"}}'
            spent = plugin.metric(created.format("sum")), plugin.metric(created.format("count"))
            await sim.close()
            return answers, spent
        finally:
            plugin.stop()

    answers, (seconds, creates) = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [answers[f"typical-{n}"] for n in range(3)] == [["created"]] * 3
    first, again = answers["values"]
    assert first == again  # the second container's answer is the cached refusal
    assert first.startswith(
        f"{POD}: cpu.limit[{MAX_VALUES - 5}] is value {MAX_VALUES + 1}: "
        f"the document has more than {MAX_VALUES} values, at most "
        f"{MAX_VALUES} are allowed (line 1, column "
    )
    assert "\n" not in first
    assert (
        answers["strays"]
        == [
            f"sla.nri.io/*: more than {MAX_SLA_KEYS} annotations are under sla.nri.io/ (with "
            f"io.kubernetes.sla/enforcement-mode); at most {MAX_SLA_KEYS} are allowed"
        ]
        * 2
    )
    # The former bounds let each such create cost 30-80 ms; now they all take a few ms.
    assert creates == 7 and seconds / creates < 0.02, f"{seconds / creates:.4f}s per create"
