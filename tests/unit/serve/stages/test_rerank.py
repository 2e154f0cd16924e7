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


def test_a_one_thread_cpu_replica_scores_one_request_per_pass_and_others_batch() -> None:
    from serve.stages.rerank import batch_size

    assert batch_size(0, threads=1, device="cpu") == 1  # a request queued behind a batch waits all of it
    assert batch_size(0, threads=2, device="cpu") == 4  # several threads use a bigger pass better
    assert batch_size(0, threads=1, device="cuda") == 4
    assert batch_size(6, threads=1, device="cpu") == 6  # an explicit size wins
