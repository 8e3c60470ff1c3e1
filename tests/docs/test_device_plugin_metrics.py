"""docs/device-plugin.md's metric table names exactly the series `nri-sla device-plugin`
exports (nri_plugin.kubelet.plugin_metrics), and its MIG resource names are the plugin's."""

from __future__ import annotations

import re
from pathlib import Path

from nri_plugin.kubelet.devices import mig_resource
from nri_plugin.kubelet.plugin_metrics import DevicePluginMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "device-plugin.md"


def test_metrics_table_names_exactly_the_exported_series():
    metrics = DevicePluginMetrics()
    exported = {
        f.name + ("_total" if f.type == "counter" else "") for f in metrics.registry.collect()
    }
    section = DOC.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = {
        name
        for line in section.splitlines()
        if line.startswith("| `nri_sla_")
        for name in re.findall(r"`(nri_sla_[a-z_]+)`", line.split("|")[1])
    }
    assert documented == exported
    assert "beside each counter its `_created`" in section


def test_mig_resource_names_in_the_doc_are_the_plugins():
    text = DOC.read_text()
    for profile in re.findall(r"`nvidia\.com/mig-(\d+g\.\d+gb)`", text):
        assert mig_resource("nvidia.com/gpu", profile) == f"nvidia.com/mig-{profile}"
    assert (
        "`mig-1g.10gb.me`" in text
        and mig_resource("nvidia.com/gpu", "1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    )
