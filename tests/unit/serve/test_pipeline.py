import asyncio

import pytest

from cluster.config import RagcConfig
from serve.answerability import FEATURES, AnswerabilityModel, OperatingPoint
from serve.edge.auth import Caller
from serve.errors import DeadlineError, UnavailableError
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest, QueryResponse
from tests.fakes import FakeStages, fake_stages


def passages(tenant: str = "t1", n: int = 4) -> list[Passage]:
    return [
        Passage(f"c{i}", f"d{i}", tenant, f"Passage number {i} about tenants.", score=1.0 / (i + 1)) for i in range(n)
    ]


def config(**serve: object) -> RagcConfig:
    base: dict = {
        "rewrite": {"timeout_s": 0.2},
        "rerank": {"timeout_s": 0.2},
        "synthesize": {"timeout_s": 0.2},
        "retrieve": {"timeout_s": 0.5},
    }
    base.update(serve)
    return RagcConfig.model_validate({"serve": base})


def run(
    stages: FakeStages,
    request: QueryRequest,
    cfg: RagcConfig | None = None,
    answerability: AnswerabilityModel | None = None,
) -> dict:
    pipeline = QueryPipeline((cfg or config()).serve, fake_stages(stages), answerability=answerability)
    return asyncio.run(pipeline.run(request, "t1", "", "req-1")).model_dump(mode="json")


def test_happy_path_reports_every_stage() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="q", rewrite=True, top_k=2))
    assert {k: v["status"] for k, v in out["stages"].items()} == {
        "rewrite": "ok",
        "retrieve": "ok",
        "rerank": "ok",
        "answerability": "skipped",
        "synthesize": "ok",
    }
    assert out["answer"] == "LLM answer [1]" and out["citations"][0]["chunk_id"] == out["passages"][0]["chunk_id"]
    assert len(out["passages"]) == 2 and out["index_version"] == 3


@pytest.mark.parametrize("stage", ["rewrite", "rerank", "synthesize"])
@pytest.mark.parametrize("fault", ["slow", "failing"])
def test_slow_or_failing_stage_falls_back(stage: str, fault: str) -> None:
    stages = FakeStages(
        passages(), delay_s={stage: 1.0} if fault == "slow" else None, fail={stage} if fault == "failing" else None
    )
    out = run(stages, QueryRequest(query="tenants", rewrite=True, top_k=3))
    assert out["stages"][stage]["status"] == "fallback"
    assert ("timed out" in out["stages"][stage]["detail"]) == (fault == "slow")
    assert not out["abstained"] and out["citations"]
    if stage == "rerank":
        assert [p["chunk_id"] for p in out["passages"]] == ["c0", "c1", "c2"], "fusion order kept"
    if stage == "synthesize":
        assert "[1]" in out["answer"] and out["stages"]["synthesize"]["detail"].startswith("extractive")


def test_degraded_retrieval_arm_is_a_fallback() -> None:
    out = run(FakeStages(passages(), arms={"dense": "failed: boom", "bm25": "ok"}), QueryRequest(query="q"))
    assert out["stages"]["retrieve"]["status"] == "fallback" and "dense" in out["stages"]["retrieve"]["detail"]


def test_retrieval_failure_is_503_with_reason() -> None:
    with pytest.raises(UnavailableError, match="retrieval unavailable"):
        run(FakeStages(passages(), fail={"retrieve"}), QueryRequest(query="q"))


def test_nothing_retrieved_abstains_without_calling_synthesis() -> None:
    stages = FakeStages([])
    out = run(stages, QueryRequest(query="q"))
    assert out["abstained"] and out["answer"] == "I don't have documents covering that."
    assert out["citations"] == [] and "synthesize" not in stages.calls and "rerank" not in stages.calls


def test_foreign_tenant_passages_are_dropped() -> None:
    mixed = passages("t1", 2) + passages("intruder", 2)
    out = run(FakeStages(mixed), QueryRequest(query="q", rerank=False))
    assert out["passages"] and all(p["chunk_id"] in ("c0", "c1") for p in out["passages"])
    out = run(FakeStages(passages("intruder", 2)), QueryRequest(query="q"))
    assert out["abstained"]


def test_the_callers_groups_reach_the_search_and_a_passage_they_may_not_read_is_dropped() -> None:
    from dataclasses import replace

    readable = [replace(p, access=access) for p, access in zip(passages("t1", 3), [("*",), ("hr",), ()], strict=True)]
    hidden = replace(passages("t1", 4)[3], access=("finance",))
    stages = FakeStages([*readable, hidden])
    pipeline = QueryPipeline(config().serve, fake_stages(stages))
    out = asyncio.run(pipeline.run(QueryRequest(query="q", rerank=False), "t1", "", "r", groups=("hr",)))
    assert stages.groups == [("hr",)]
    assert {p["chunk_id"] for p in out.model_dump()["passages"]} == {"c0", "c1", "c2"}


def test_the_cache_scope_holds_the_callers_groups() -> None:
    pipeline = QueryPipeline(config().serve, fake_stages(FakeStages(passages())))
    request = QueryRequest(query="q")
    none, hr = (pipeline.scope(request, "t1", "", 3, groups) for groups in ((), ("hr",)))
    assert none.digest() != hr.digest() != pipeline.scope(request, "t1", "", 3, ("hr", "ops")).digest()
    assert hr.digest() == pipeline.scope(request, "t1", "", 3, ("hr",)).digest()


def test_request_deadline_is_a_504() -> None:
    from serve.edge.ingress import Ingress

    cfg = config(request_timeout_s=0.3, retrieve={"timeout_s": 5.0})
    cfg.serve.auth.enabled = False

    async def ready() -> tuple[bool, None]:
        return True, None

    ingress = Ingress(
        cfg.model_dump(mode="json"), fake_stages(FakeStages(passages(), delay_s={"retrieve": 2.0})), ready
    )
    with pytest.raises(DeadlineError, match="deadline"):
        asyncio.run(ingress._run_with_deadline(QueryRequest(query="q"), Caller("t1"), "", "r"))


def test_remote_failures_are_reported_by_their_cause() -> None:
    from serve.pipeline import failure_reason

    class Wrapped(Exception):
        def __init__(self) -> None:
            super().__init__("ray::ServeReplica traceback\n  File x\nRuntimeError: both arms failed")
            self.cause = RuntimeError("both retrieval arms failed: dense: timeout")

    assert failure_reason(Wrapped()) == "RuntimeError: both retrieval arms failed: dense: timeout"
    assert failure_reason(ValueError("a\nb")) == "ValueError: b"

    class WrappedGrpc(Exception):  # a Milvus search that ran out of time, raised in the replica
        def __init__(self) -> None:
            super().__init__("ray::ServeReplica traceback\nRuntimeError: >")
            self.cause = RuntimeError("both retrieval arms failed: dense: <_InactiveRpcError\n\tstatus = DEADLINE\n>")

    assert (
        failure_reason(WrappedGrpc())
        == "RuntimeError: both retrieval arms failed: dense: <_InactiveRpcError status = DEADLINE >"
    )


def top_logit_model(threshold: float = 0.5) -> AnswerabilityModel:
    """p = sigmoid(top logit): answerable above a logit of 0 (the other features weigh nothing)."""
    n = len(FEATURES)
    return AnswerabilityModel(
        features=list(FEATURES),
        mean=[0.0] * n,
        scale=[1.0] * n,
        coef=[1.0] + [0.0] * (n - 1),
        intercept=0.0,
        operating_point=OperatingPoint(threshold=threshold, abstention=0.5, false_abstention=0.05),
        reranker="test",
    )


def test_a_calibrated_answerability_lets_a_strong_match_through() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="q"), answerability=top_logit_model())
    assert not out["abstained"] and out["answerability"] > 0.95 and "synthesize" in stages.calls
    assert out["stages"]["answerability"]["status"] == "ok" and ">=" in out["stages"]["answerability"]["detail"]


def test_a_low_answerability_abstains_after_rerank_without_calling_the_llm() -> None:
    stages = FakeStages(passages())
    stages.rerank_scores = [-3.0, -4.0, -5.0]
    out = run(stages, QueryRequest(query="q"), answerability=top_logit_model())
    assert out["abstained"] and out["answer"] == "I don't have documents covering that." and out["citations"] == []
    assert "rerank" in stages.calls and "synthesize" not in stages.calls
    assert out["answerability"] < 0.05 and out["stages"]["synthesize"]["detail"].startswith("abstained: ")


def test_the_configured_probability_overrides_the_calibrated_one() -> None:
    stages = FakeStages(passages())  # top logit 4: p = 0.982
    cfg = config(answerability={"min_probability": 0.99})
    out = run(stages, QueryRequest(query="q"), cfg, answerability=top_logit_model(threshold=0.5))
    assert out["abstained"] and "< 0.990" in out["stages"]["answerability"]["detail"]


@pytest.mark.parametrize("rerank", ["fallback", "not requested"])
def test_without_cross_encoder_scores_the_cosine_floor_alone_decides(rerank: str) -> None:
    stages = FakeStages(passages(), fail={"rerank"} if rerank == "fallback" else None)
    stages.rerank_scores = [-3.0, -4.0, -5.0]  # would abstain, had the reranker answered
    out = run(stages, QueryRequest(query="q", rerank=rerank == "fallback"), answerability=top_logit_model())
    assert not out["abstained"] and out["answerability"] is None
    assert out["stages"]["answerability"]["status"] == "skipped"
    assert "cosine floor alone decides" in out["stages"]["answerability"]["detail"]


def test_a_question_outside_the_rerankers_domain_keeps_the_fusion_order_and_is_not_degraded() -> None:
    stages = FakeStages(passages())
    stages.rerank_outside = "fusion order kept: the question is unlike those the reranker was trained on"
    out = run(stages, QueryRequest(query="q"), answerability=top_logit_model())
    assert out["stages"]["rerank"] == out["stages"]["rerank"] | {"status": "skipped", "detail": stages.rerank_outside}
    assert [p["doc_id"] for p in out["passages"]] == [p.doc_id for p in passages()][: len(out["passages"])]
    assert out["answerability"] is None and "cosine floor alone decides" in out["stages"]["answerability"]["detail"]
    assert not QueryResponse.model_validate(out).degraded()  # cached as a full answer


def test_a_full_retrieval_queue_is_a_503_to_retry_and_other_full_stages_fall_back() -> None:
    from serve.errors import OverloadedError

    with pytest.raises(OverloadedError, match="retrieval overloaded") as refused:
        run(FakeStages(passages(), full={"retrieve"}), QueryRequest(query="q"))
    assert refused.value.status_code == 503 and refused.value.retry_after_s == 1.0
    stages = FakeStages(passages(), full={"rerank", "synthesize"})
    out = run(stages, QueryRequest(query="q", rerank=True))
    for stage in ("rerank", "synthesize"):
        assert out["stages"][stage]["status"] == "fallback" and "overloaded" in out["stages"][stage]["detail"]
    assert out["citations"]  # the extractive answer


def test_rerank_by_default_is_decided_per_tenant_where_configured() -> None:
    """A reranker helps where it was checked: serve.rerank.tenants overrides rerank_default for a tenant
    (the pipeline runs as tenant t1); a request's own `rerank` still wins."""

    def rerank_status(request: QueryRequest, **rerank: object) -> tuple[str, str]:
        out = run(FakeStages(passages()), request, config(rerank={"timeout_s": 0.2, **rerank}))
        return out["stages"]["rerank"]["status"], out["stages"]["rerank"]["detail"]

    plain = QueryRequest(query="q")
    assert rerank_status(plain)[0] == "ok"
    assert rerank_status(plain, tenants={"t1": False}) == ("skipped", "off for this tenant (serve.rerank.tenants)")
    assert rerank_status(plain, tenants={"t2": False})[0] == "ok"
    assert rerank_status(plain, rerank_default=False) == ("skipped", "off by default")
    assert rerank_status(plain, rerank_default=False, tenants={"t1": True})[0] == "ok"
    assert rerank_status(QueryRequest(query="q", rerank=True), tenants={"t1": False})[0] == "ok"
    assert rerank_status(QueryRequest(query="q", rerank=False)) == ("skipped", "not requested")


def test_a_stage_refusing_the_request_is_the_clients_error_not_a_stage_failure() -> None:
    """A 4xx a remote stage raised (Ray wraps it, with the original as `cause`) reaches the client as it is;
    any other exception is a `StageFailure`, for the fallback."""
    from serve.errors import BadRequestError
    from serve.pipeline import StageFailure, call_stage

    class Wrapped(Exception):
        def __init__(self, cause: Exception) -> None:
            super().__init__("ray::ServeReplica traceback")
            self.cause = cause

    async def raising(exc: Exception) -> None:
        raise exc

    with pytest.raises(BadRequestError, match=r"^filter on tags: rebuild$"):
        asyncio.run(call_stage("retrieve", lambda: raising(Wrapped(BadRequestError("filter on tags: rebuild"))), 5))
    with pytest.raises(StageFailure, match="RuntimeError: down"):
        asyncio.run(call_stage("retrieve", lambda: raising(Wrapped(RuntimeError("down"))), 5))
