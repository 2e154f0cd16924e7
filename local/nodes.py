"""Several Ray nodes on this machine: a head and N workers, each with its own logical CPUs and a
`ragc.io/node` label. Enough to show placement, node failure and scaling for real without a second
machine (`ragc up --nodes N`, the multi-node tests)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cluster.ray_runtime import NODE_LABEL, started_with_retries

if TYPE_CHECKING:
    from ray._private.node import Node
    from ray.cluster_utils import Cluster

MB = 1024 * 1024
HEAD = "head"


def worker_name(index: int) -> str:
    return f"worker-{index}"


def worker_metrics_port(head_port: int, index: int) -> int:
    """Each node's metrics agent serves the replicas on that node: the head's port, then one per worker."""
    return head_port + 1 + index


@dataclass
class LocalNodes:
    """A running head and its workers; `kill` takes a worker away as a lost machine would (SIGKILL)."""

    cluster: Cluster
    worker_args: dict[str, Any]
    metrics_export_port: int | None = None
    workers: dict[str, Node] = field(default_factory=dict)
    started: int = 0

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_worker(self) -> str:
        """Start the next worker (`worker-<n>`, never reusing a lost one's name); returns its name."""
        index, self.started = self.started, self.started + 1
        name = worker_name(index)
        args = self.worker_args | {"labels": {NODE_LABEL: name}}
        if self.metrics_export_port:
            args["metrics_export_port"] = worker_metrics_port(self.metrics_export_port, index)
        self.workers[name] = started_with_retries(lambda: self.cluster.add_node(**args), f"local Ray {name}")
        return name

    def kill(self, name: str) -> None:
        self.cluster.remove_node(self.workers.pop(name), allow_graceful=False)

    def replace_dead_workers(self) -> dict[str, str]:
        """Each worker with a dead process (its raylet, object store or agents) is removed and a new worker
        started in its place, as a cluster autoscaler replaces a lost machine; returns {dead: replacement}."""
        dead = [name for name, node in self.workers.items() if not node.remaining_processes_alive()]
        replaced = {}
        for name in dead:
            self.kill(name)
            replaced[name] = self.add_worker()
        return replaced

    def shutdown(self) -> None:
        self.cluster.shutdown()


def start_local_nodes(
    workers: int,
    cpus_per_worker: int,
    head_cpus: int = 0,
    object_store_mb: int = 256,
    metrics_export_port: int | None = None,
) -> LocalNodes:
    """Start a head (`head_cpus` logical CPUs: 0 keeps work off it, as on a cluster whose head only
    coordinates) and `workers` nodes named `worker-0`... The caller connects with `ray.init(address=...)`.
    With `metrics_export_port`, worker i's metrics are at `worker_metrics_port(port, i)`."""

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray gives a new GCS 30 s to write its port file (120 s with a rocksdb backend); on a saturated 2-core
    # machine a local head missed the 30 s once (2026-12-05, fresh-clone CI run) and the module's nodes never came up
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
    common: dict[str, Any] = {"object_store_memory": object_store_mb * MB}
    head: dict[str, Any] = common | {"num_cpus": head_cpus, "include_dashboard": False, "labels": {NODE_LABEL: HEAD}}
    if metrics_export_port:
        head["metrics_export_port"] = metrics_export_port
    cluster = _start_head(head)
    nodes = LocalNodes(cluster, common | {"num_cpus": cpus_per_worker}, metrics_export_port)
    try:
        for _ in range(workers):
            nodes.add_worker()
        cluster.wait_for_nodes()
    except Exception:
        cluster.shutdown()
        raise
    logging.getLogger(__name__).info("local Ray: a head and %d workers at %s", workers, nodes.address)
    return nodes


def _start_head(head_args: dict[str, Any]) -> Cluster:
    from ray.cluster_utils import Cluster

    return started_with_retries(lambda: Cluster(initialize_head=True, head_node_args=head_args), "local Ray head")
