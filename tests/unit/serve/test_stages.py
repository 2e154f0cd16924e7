"""Stage helpers: rank fusion, the extractive answer, citation checks, rerank threads, the Serve config."""

from __future__ import annotations

import pytest

from cluster.config import RagcConfig, SynthesizeConfig
from serve.extractive import best_excerpt, extractive_answer
from serve.fusion import rrf_fuse
from serve.stages.synthesize import validate_citations
from serve.types import Passage


def test_rrf_fuse_rewards_agreement() -> None:
    scores = rrf_fuse([["a", "b", "c"], ["b", "d"]], k=60)
    assert max(scores, key=lambda k: scores[k]) == "b"
    assert scores["a"] == pytest.approx(1 / 61)


def test_extractive_answer_cites_the_passages_it_quotes() -> None:
    passages = [
        Passage("c1", "d1", "t", "# Title\n\nTenants are isolated by partition key. Unrelated sentence here."),
        Passage("c2", "d2", "t", "Another passage about caching."),
    ]
    result = extractive_answer("how are tenants isolated", passages, SynthesizeConfig(extractive_passages=2))
    assert result.cited == [1, 2] and result.grounded
    assert result.answer.startswith("Tenants are isolated by partition key.")
    assert "[1]" in result.answer and "# Title" not in result.answer
    assert best_excerpt("x", "", 100) == ""


def test_citations_to_nothing_are_removed_and_counted() -> None:
    cleaned, cited, removed = validate_citations("A [1]. B [7]. C [2][0].", passages_sent=2)
    assert cited == [1, 2] and removed == 2
    assert "[7]" not in cleaned and "[0]" not in cleaned


def test_serve_config_is_a_valid_serve_deploy_schema() -> None:
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import ServeDeploySchema

    from serve.serve_config import serve_deploy_config

    cfg = RagcConfig.model_validate({"serve": {"deployments": {"rerank": {"max_replicas": 7}}}})
    rendered = serve_deploy_config(cfg)
    ServeDeploySchema.model_validate(rendered)
    deployments = {d["name"]: d for d in rendered["applications"][0]["deployments"]}
    assert set(deployments) == {"ingress", "rewrite", "retrieve", "rerank", "synthesize", "llm_default"}
    no_llm = RagcConfig.model_validate({"serve": {"llm": {"enabled": False}}})
    assert "llm_default" not in {d["name"] for d in serve_deploy_config(no_llm)["applications"][0]["deployments"]}
    for options in deployments.values():
        AutoscalingConfig(**options["autoscaling_config"])
    assert deployments["rerank"]["autoscaling_config"]["max_replicas"] == 7


def test_rerank_replica_threads_split_the_cores_between_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.config import DeploymentConfig
    from serve.stages.rerank import replica_threads

    monkeypatch.setattr("serve.stages.rerank.available_cpus", lambda: 8)
    assert replica_threads(0, DeploymentConfig(max_replicas=2)) == 4
    assert replica_threads(0, DeploymentConfig(max_replicas=16)) == 1  # never zero threads
    assert replica_threads(0, DeploymentConfig(max_replicas=2, num_cpus=3)) == 3  # a reservation decides
    assert replica_threads(6, DeploymentConfig(max_replicas=2, num_cpus=3)) == 6  # an explicit count wins


def test_arm_hits_keep_only_the_arms_a_pipeline_uses() -> None:
    from serve.stages.retrieve import ArmHits

    hits = ArmHits({"dense": [{"id": "a"}], "bm25": [{"id": "b"}]}, {"dense": "ok", "bm25": "ok"}, True, "query")
    assert set(hits.only(dense=True, bm25=False).results) == {"dense"}
    assert hits.only(dense=False, bm25=True).arms == {"bm25": "ok"}
    assert hits.only(dense=True, bm25=True) == hits
