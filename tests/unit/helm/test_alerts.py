"""The chart's alerting rules: promtool checks them and runs their unit tests (alerts_test.yaml: each alert fires
on its condition and stays quiet on healthy traffic), and every series they read is one the service records,
with the labels and label values it writes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from serve import metrics
from serve.types import CacheStatus, StageStatusName
from tests.unit.helm.test_chart import BASE, ROOT, render

HERE = Path(__file__).parent
NAMESPACE = "rag"  # test_chart.render's, and the namespace alerts_test.yaml's series carry
ENABLED = {**BASE, "alerts": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}
SELECTOR = re.compile(r"\bray_(ragc_[a-z_]+?)(_total|_bucket|_count|_sum)?\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPED_BY = re.compile(r"\bby\s*\(([^)]*)\)")
# what the code writes into the labels the rules match on exactly
LABEL_VALUES: dict[str, tuple[str, ...]] = {
    "ragc_stage_seconds/status": get_args(StageStatusName),
    "ragc_stage_fallbacks/status": ("fallback", "error"),
    "ragc_cache_lookups/status": get_args(CacheStatus),
    "ragc_breaker_events/event": get_args(metrics.BreakerEvent),
    "ragc_api_key_reloads/outcome": get_args(metrics.KeyReloadOutcome),
    "ragc_incidents/kind": get_args(metrics.IncidentKind),
    "ragc_tenant_outcomes/outcome": get_args(metrics.UsageOutcome),
}
STAGES = ("rewrite", "retrieve", "rerank", "synthesize")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:  # a missing tool is a failure, never a skip
        pytest.fail("promtool is not installed (apt-get install prometheus; make system-deps does)", pytrace=False)
    return found


def rule_object(values: dict[str, Any]) -> dict[str, Any]:
    (rule,) = [d for d in render(values) if d["kind"] == "PrometheusRule"]
    return rule


def rules(values: dict[str, Any] = ENABLED) -> list[dict[str, Any]]:
    return [r for group in rule_object(values)["spec"]["groups"] for r in group["rules"]]


def recorded() -> dict[str, tuple[str, ...]]:
    """Metric name -> label names, from the objects the replicas record through (outside Ray they only exist)."""
    made = metrics.query_metrics()
    return {m.info["name"]: tuple(m.info["tag_keys"]) for m in vars(made).values()}


def test_alerts_are_off_by_default_and_carry_the_labels_prometheus_selects_on() -> None:
    assert not [d for d in render(BASE) if d["kind"] == "PrometheusRule"]
    rule = rule_object(ENABLED)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for alert in rules():
        assert alert["labels"]["severity"] in ("critical", "warning"), alert
        assert alert["labels"]["namespace"] == NAMESPACE
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], alert


def test_promtool_checks_the_rules_and_passes_their_unit_tests(tmp_path: Path) -> None:
    tool = promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_object(ENABLED)["spec"]))
    shutil.copy(HERE / "alerts_test.yaml", tmp_path / "alerts_test.yaml")
    for argv in (["check", "rules", "rules.yaml"], ["test", "rules", "alerts_test.yaml"]):
        run = subprocess.run([tool, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.stdout + run.stderr
    tested = set(re.findall(r"alertname: (\w+)", (HERE / "alerts_test.yaml").read_text()))
    assert tested == {r["alert"] for r in rules()}, "every alert has its promtool test"


def test_every_series_an_alert_reads_is_recorded_with_those_labels_and_values() -> None:
    names = recorded()
    read = 0
    for alert in rules():
        expr = alert["expr"]
        for name, suffix, matchers in SELECTOR.findall(expr):
            assert name in names, f"{alert['alert']} reads {name}, which serve/metrics.py does not record"
            labels = set(names[name]) | ({"le"} if suffix == "_bucket" else set())
            for label, op, value in MATCHER.findall(matchers):
                if label == "namespace":  # the scrape's, not the service's (alerts.matchLabels)
                    continue
                assert label in labels, f"{alert['alert']}: {name} has no label {label!r}"
                known = LABEL_VALUES.get(f"{name}/{label}")
                if label == "stage":
                    known = STAGES
                if known is not None and op in ("=", "=~"):
                    wanted = value.split("|") if op == "=~" else [value]
                    assert set(wanted) <= set(known), f"{alert['alert']}: {name}{{{label}}} is never {wanted}"
                read += 1
        for grouped in GROUPED_BY.findall(expr):
            selected = [n for n, _, _ in SELECTOR.findall(expr)]
            for label in (g.strip() for g in grouped.split(",")):
                assert any(label in names[n] or label == "le" for n in selected), (alert["alert"], label)
    assert read > 10


def test_match_labels_replace_the_namespace_in_every_selector() -> None:
    scoped = {**BASE, "alerts": {"enabled": True, "matchLabels": {"job": "rag/rel-ragc"}}}
    for alert in rules(scoped):
        selectors = [m for _, _, m in SELECTOR.findall(alert["expr"])]
        assert selectors and all('job="rag/rel-ragc"' in s and "namespace=" not in s for s in selectors), alert


def stage_latency_limits(values: dict[str, Any]) -> dict[str, float]:
    slow = [r for r in rules(values) if r["alert"] == "RagcStageSlow"]
    return {r["labels"]["stage"]: float(r["expr"].split(") > ", 1)[1].split()[0]) for r in slow}


def test_a_stage_is_slow_near_the_timeout_the_release_gives_it() -> None:
    from cluster.config import RagcConfig
    from serve.serve_config import stage_timeouts

    share = yaml.safe_load((ROOT / "helm" / "ragc" / "values.yaml").read_text())["alerts"]["stageLatencyTimeoutShare"]
    defaults = {stage: round(t * share, 3) for stage, t in stage_timeouts(RagcConfig()).items()}
    assert stage_latency_limits(ENABLED) == defaults
    gpu = yaml.safe_load((ROOT / "helm" / "ragc" / "values-gpu.yaml").read_text())  # rewrite 2 s, synthesize 10 s
    assert stage_latency_limits({**gpu, "alerts": {"enabled": True}}) == defaults | {"rewrite": 1.6, "synthesize": 8.0}
    pinned = {**BASE, "alerts": {"enabled": True, "stageLatencyP95Seconds": {"rerank": 1.5}}}
    assert stage_latency_limits(pinned) == defaults | {"rerank": 1.5}


def test_every_alert_has_a_runbook_entry_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n### Alerts\n", 1)[1].split("\n## ", 1)[0]
    for name in {r["alert"] for r in rules()}:
        assert f"`{name}`" in section, f"README, Alerts, says nothing of {name}"
