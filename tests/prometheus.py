"""A real Prometheus server (from the apt `prometheus` package, which also brings promtool) that scrapes one target
and evaluates given rules: on this machine, what the chart's PodMonitor and PrometheusRule do in a cluster."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from local.http_wait import wait_for_http

INTERVAL = "1s"  # scrape and rule evaluation: an alert without `for` fires a second after its series arrives


@dataclass(frozen=True)
class Prometheus:
    base: str

    def api(self, path: str) -> Any:
        response = httpx.get(f"{self.base}/api/v1/{path}", timeout=10)
        response.raise_for_status()
        return response.json()["data"]

    def alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["state"] == state]

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_prometheus(root: Path, rules: dict[str, Any], target: str, labels: dict[str, str]) -> Iterator[Prometheus]:
    """`rules`: a rule file's content (`groups`); `labels`: added to every scraped series, as the operator adds
    the pod's namespace."""
    binary = shutil.which("prometheus")
    if binary is None:  # a missing server is a failure, never a skip
        pytest.fail("prometheus is not installed (apt-get install prometheus; make test-deps does)", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    (root / "rules.yaml").write_text(yaml.safe_dump(rules))
    scrape = {"job_name": "ragc", "static_configs": [{"targets": [target], "labels": labels}]}
    config = {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(root / "rules.yaml")],
        "scrape_configs": [scrape],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    argv = [
        binary,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with (root / "prometheus.log").open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/-/ready", timeout_s=60, alive=lambda: process.poll() is None)
            yield Prometheus(f"http://127.0.0.1:{port}")
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
