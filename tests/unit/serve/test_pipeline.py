import asyncio

import pytest

from cluster.config import RagcConfig
from serve.errors import DeadlineError, UnavailableError
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest
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


def run(stages: FakeStages, request: QueryRequest, cfg: RagcConfig | None = None) -> dict:
    pipeline = QueryPipeline((cfg or config()).serve, fake_stages(stages))
    return asyncio.run(pipeline.run(request, "t1", "", "req-1")).model_dump(mode="json")


def test_happy_path_reports_every_stage() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="q", rewrite=True, top_k=2))
    assert {k: v["status"] for k, v in out["stages"].items()} == {
        "rewrite": "ok",
        "retrieve": "ok",
        "rerank": "ok",
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
        asyncio.run(ingress._run_with_deadline(QueryRequest(query="q"), "t1", "", "r"))


def test_remote_failures_are_reported_by_their_cause() -> None:
    from serve.pipeline import failure_reason

    class Wrapped(Exception):
        def __init__(self) -> None:
            super().__init__("ray::ServeReplica traceback\n  File x\nRuntimeError: both arms failed")
            self.cause = RuntimeError("both retrieval arms failed: dense: timeout")

    assert failure_reason(Wrapped()) == "RuntimeError: both retrieval arms failed: dense: timeout"
    assert failure_reason(ValueError("a\nb")) == "ValueError: b"
