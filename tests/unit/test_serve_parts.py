from pathlib import Path

import pytest

from cluster.config import AuthConfig, LimitsConfig, RagcConfig, SecretRef, SynthesizeConfig
from serve.edge.auth import Authenticator
from serve.edge.filters import compile_filters
from serve.errors import BadRequestError, UnauthorizedError
from serve.extractive import best_excerpt, extractive_answer
from serve.fusion import rrf_fuse
from serve.stages.synthesize import validate_citations
from serve.types import Passage

ALLOWED = RagcConfig().serve.filters
LIMITS = LimitsConfig()


def test_filters_compile_to_escaped_typed_clauses() -> None:
    expr = compile_filters(
        {"doc_type": "md", "year": {"gte": 2019, "lte": 2021}, "source": {"in": ["a", "b"]}}, ALLOWED, LIMITS
    )
    assert expr == '(doc_type == "md") and (year >= 2019) and (year <= 2021) and (source in ["a", "b"])'
    assert compile_filters({}, ALLOWED, LIMITS) == ""


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"doc_type": '" or 1==1 or "'}, "quotes"),
        ({"doc_type": "md' or '1'=='1"}, "quotes"),
        ({"tenant_id": "other"}, "unknown filter field"),
        ({"year or 1==1": 1}, "unknown filter field"),
        ({"year": "2020 or 1==1"}, "takes an integer"),
        ({"year": True}, "takes an integer"),
        ({"doc_type": 5}, "takes a string"),
        ({"doc_type": {"gte": "a"}}, "not allowed"),
        ({"doc_type": {"like": "a%"}}, "not allowed"),
        ({"source": {"in": []}}, "non-empty list"),
        ({"doc_type": "a\nb"}, "control characters"),
    ],
)
def test_filters_refuse_injection_unknown_fields_and_wrong_types(filters: dict, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        compile_filters(filters, ALLOWED, LIMITS)


def test_auth_maps_keys_to_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEYS", '{"k-a": "alpha", "k-b": "beta"}')
    auth = Authenticator(AuthConfig(api_keys=SecretRef(env_var="TEST_KEYS")), "0.0.0.0")
    assert auth.tenant_for("Bearer k-a", None) == "alpha"
    assert auth.tenant_for(None, "k-b") == "beta"
    with pytest.raises(UnauthorizedError, match="missing"):
        auth.tenant_for(None, None)
    with pytest.raises(UnauthorizedError, match="unknown"):
        auth.tenant_for("Bearer nope", None)


def test_auth_off_is_single_tenant_and_loopback_only() -> None:
    off = AuthConfig(enabled=False, single_tenant="demo")
    assert Authenticator(off, "127.0.0.1").tenant_for(None, None) == "demo"
    with pytest.raises(ValueError, match="non-loopback"):
        Authenticator(off, "0.0.0.0")


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


def test_available_cpus_honours_a_cgroup_quota(tmp_path: Path) -> None:
    from cluster.models import available_cpus

    cpu_max = tmp_path / "cpu.max"
    unlimited = available_cpus(tmp_path / "absent")
    cpu_max.write_text("max 100000\n")
    assert available_cpus(cpu_max) == unlimited
    cpu_max.write_text("150000 100000\n")  # a 1.5-CPU limit: two threads, not the node's cores
    assert available_cpus(cpu_max) == min(2, unlimited)


def test_bf16_only_where_it_is_native(tmp_path: Path) -> None:
    from cluster.models import native_bf16, pick_dtype

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n")
    assert not native_bf16("cpu", cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert native_bf16("cpu", cpuinfo)
    assert native_bf16("cuda", tmp_path / "absent") and not native_bf16("cpu", tmp_path / "absent")
    assert pick_dtype("float32", "cuda") == "float32"  # an explicit choice is kept


def test_arm_hits_keep_only_the_arms_a_pipeline_uses() -> None:
    from serve.stages.retrieve import ArmHits

    hits = ArmHits({"dense": [{"id": "a"}], "bm25": [{"id": "b"}]}, {"dense": "ok", "bm25": "ok"}, True, "query")
    assert set(hits.only(dense=True, bm25=False).results) == {"dense"}
    assert hits.only(dense=False, bm25=True).arms == {"bm25": "ok"}
    assert hits.only(dense=True, bm25=True) == hits
