"""packaging/monitoring: the PrometheusRule with the alerts docs/operations.md suggests, the
PodMonitor for the DaemonSet and the Grafana dashboard name only series nri-sla exports,
with label values it uses, and select what the DaemonSet runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from nri_plugin.ops.metrics import OUTCOMES, REPAIR_OUTCOMES, Metrics
from nri_plugin.plugin.container_metrics import ContainerCollector
from nri_plugin.plugin.report import NodeReport

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "packaging" / "monitoring"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}
# label values the expressions may match, per label name
LABEL_VALUES = {"outcome": set(OUTCOMES) | set(REPAIR_OUTCOMES), "event": {"CreateContainer"}}


def exported_series() -> set[str]:
    families = [
        *Metrics().registry.collect(),
        *ContainerCollector(lambda: NodeReport(at=0, interval=30), 10).describe(),
    ]
    return {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}


def check_expression(expr: str, known: set[str]) -> None:
    names = set(re.findall(r"\bnri_sla_[a-z_]+", expr))
    assert names, expr
    assert names <= known, (expr, names - known)
    for label, value in re.findall(r'(\w+)="([^"]*)"', expr):
        assert value in LABEL_VALUES[label], (expr, label, value)


@pytest.fixture(scope="module")
def known() -> set[str]:
    return exported_series()


def rules() -> list[dict]:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    (group,) = doc["spec"]["groups"]
    return group["rules"]


def test_alerts_name_exported_series(known):
    alerts = rules()
    assert len({a["alert"] for a in alerts}) == len(alerts)
    for alert in alerts:
        check_expression(alert["expr"], known)
        assert alert["labels"]["severity"] in ("critical", "warning", "info")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "0s"))


def test_every_suggested_alert_has_a_rule():
    text = (REPO / "docs" / "operations.md").read_text()
    suggested = text.split("Suggested alerts:", 1)[1].split("\n\n", 1)[0]
    wanted = set(re.findall(r"\bnri_sla_[a-z_]+", suggested))
    written = {n for a in rules() for n in re.findall(r"\bnri_sla_[a-z_]+", a["expr"])}
    assert wanted and wanted <= written, wanted - written


def test_the_mutation_of_a_name_is_caught(known):
    with pytest.raises(AssertionError):
        check_expression("nri_sla_registerd == 0", known)
    with pytest.raises(AssertionError):
        check_expression('nri_sla_decisions_total{outcome="refusd"}', known)


def test_podmonitor_selects_the_daemonsets_metrics_port():
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    docs = yaml.safe_load_all((REPO / "packaging" / "kubernetes" / "daemonset.yaml").read_text())
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    assert monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["namespace"] == ds["metadata"]["namespace"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {
        p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c.get("ports", ())
    }
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["port"] == "metrics"


def test_dashboard_panels_query_exported_series(known):
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] == "nri-sla"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        cell = (grid["x"], grid["y"])
        assert cell not in cells, panel["title"]  # no panel hides another
        cells.add(cell)
        assert panel["targets"]
        for target in panel["targets"]:
            check_expression(target["expr"], known)
