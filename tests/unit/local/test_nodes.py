"""The local multi-node head, and each worker, is started again when Ray timed out starting it, and only then."""

from typing import Any

import pytest

from local.nodes import NODE_LABEL, LocalNodes, _start_head

GCS_TIMEOUT = "Timed out waiting for file /tmp/ray/session_x/gcs_server_port_abc"  # a fresh-clone CI run, 2026-12-05


class FlakyCluster:
    """Stands in for `ray.cluster_utils.Cluster`: its constructor raises the queued failures first."""

    failures: list[Exception] = []
    starts = 0

    def __init__(self, initialize_head: bool, head_node_args: dict[str, Any]) -> None:
        type(self).starts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.head_node_args = head_node_args
        self.added: list[dict[str, Any]] = []

    def add_node(self, **args: Any) -> dict[str, Any]:
        type(self).starts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.added.append(args)
        return args


@pytest.fixture
def flaky_cluster(monkeypatch: pytest.MonkeyPatch) -> type[FlakyCluster]:
    import ray.cluster_utils

    monkeypatch.setattr(FlakyCluster, "failures", [])
    monkeypatch.setattr(FlakyCluster, "starts", 0)
    monkeypatch.setattr(ray.cluster_utils, "Cluster", FlakyCluster)
    return FlakyCluster


def test_a_head_that_timed_out_is_started_again(flaky_cluster: type[FlakyCluster]) -> None:
    flaky_cluster.failures = [Exception(GCS_TIMEOUT), Exception("The current node timed out during startup.")]
    cluster = _start_head({"num_cpus": 0})
    assert flaky_cluster.starts == 3 and cluster.head_node_args == {"num_cpus": 0}  # type: ignore[attr-defined]


def test_any_other_failure_or_a_third_timeout_is_raised(flaky_cluster: type[FlakyCluster]) -> None:
    flaky_cluster.failures = [ValueError("bad port")]
    with pytest.raises(ValueError, match="bad port"):
        _start_head({})
    assert flaky_cluster.starts == 1
    flaky_cluster.failures = [Exception(GCS_TIMEOUT)] * 3
    with pytest.raises(Exception, match="gcs_server_port"):
        _start_head({})
    assert flaky_cluster.starts == 4


def test_a_worker_that_timed_out_is_started_again_under_its_name(flaky_cluster: type[FlakyCluster]) -> None:
    """A worker's raylet that did not register in time (a fresh-clone CI run, 2026-12-06) is started again, as a head
    is; any other failure is raised at once."""
    cluster = _start_head({})
    nodes = LocalNodes(cluster, {"num_cpus": 2}, metrics_export_port=9000)  # type: ignore[arg-type]
    flaky_cluster.failures = [Exception("The current node timed out during startup.")]
    assert nodes.add_worker() == "worker-0"
    assert cluster.added == [{"num_cpus": 2, "labels": {NODE_LABEL: "worker-0"}, "metrics_export_port": 9001}]  # type: ignore[attr-defined]
    assert flaky_cluster.starts == 3 and list(nodes.workers) == ["worker-0"]
    flaky_cluster.failures = [ValueError("bad port")]
    with pytest.raises(ValueError, match="bad port"):
        nodes.add_worker()
    assert flaky_cluster.starts == 4 and list(nodes.workers) == ["worker-0"]
