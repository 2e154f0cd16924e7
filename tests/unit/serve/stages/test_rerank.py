"""The rerank stage's replica sizing."""

from __future__ import annotations

import pytest


def test_rerank_replica_threads_split_the_cores_between_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.config import DeploymentConfig
    from serve.stages.rerank import replica_threads

    monkeypatch.setattr("serve.stages.rerank.available_cpus", lambda: 8)
    assert replica_threads(0, DeploymentConfig(max_replicas=2)) == 4
    assert replica_threads(0, DeploymentConfig(max_replicas=16)) == 1  # never zero threads
    assert replica_threads(0, DeploymentConfig(max_replicas=2, num_cpus=3)) == 3  # a reservation decides
    assert replica_threads(6, DeploymentConfig(max_replicas=2, num_cpus=3)) == 6  # an explicit count wins
