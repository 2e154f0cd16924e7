"""The API contract: OpenAPI is generated from the models the ingress returns, not written by hand."""

from __future__ import annotations

import pytest

from serve.edge.ingress import make_ingress_app
from serve.types import QueryResponse, StageStatus, settled_fallback


def test_the_query_response_schema_is_the_response_model() -> None:
    api, _ = make_ingress_app()
    schema = api.openapi()
    components = schema["components"]["schemas"]
    operation = schema["paths"]["/v1/query"]["post"]
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/QueryResponse"}
    assert set(components["QueryResponse"]["properties"]) == set(QueryResponse.model_fields)
    for name in ("Citation", "PassageOut", "StageStatus", "RetrievalQuery"):
        assert name in components, name
    for status in ("400", "401", "413", "415", "503", "504"):
        error = operation["responses"][status]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorBody"}, status
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/QueryRequest")
    assert {"QueryRequest", "Turn"} <= set(components)
    chat = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat == {"$ref": "#/components/schemas/ChatRequest"} and {"ChatMessage", "RagcOptions"} <= set(components)
    assert "/v1/models" in schema["paths"]


def test_a_cached_response_round_trips_through_its_json() -> None:
    response = QueryResponse.model_validate(
        {
            "answer": "Tenants are filtered [1].",
            "citations": [{"n": 1, "chunk_id": "c", "doc_id": "d", "title": "t", "source": "s", "score": 0.5}],
            "passages": [
                {
                    "n": 1,
                    "chunk_id": "c",
                    "doc_id": "d",
                    "title": "t",
                    "source": "s",
                    "section": "",
                    "text": "x",
                    "score": 0.5,
                    "dense_score": None,
                }
            ],
            "abstained": False,
            "grounded": True,
            "stages": {"cache": {"status": "miss", "ms": 1.234}, "retrieve": {"status": "ok", "ms": 3, "detail": ""}},
            "index_version": 3,
            "request_id": "r",
            "tenant": "t1",
            "retrieval_query": {"query": "q"},
        }
    )
    assert response.stages["cache"].ms == 1.23 and response.stages["retrieve"].detail is None
    assert QueryResponse.model_validate_json(response.model_dump_json()) == response
    assert not response.degraded()


@pytest.mark.parametrize(
    ("stage", "detail", "degraded"),
    [
        ("synthesize", "extractive answer: uncited claim: 'The passages' ; 2 passages sent", False),
        ("synthesize", "extractive answer: degenerate: a repeated line", False),
        ("synthesize", "extractive answer: unsupported claim: 'x' (support 0.2 < 0.4) (no time to retry)", True),
        ("synthesize", "extractive answer: uncited claim: 'x' (the strict retry ran out of time)", True),
        ("synthesize", "extractive answer: timed out after 25s", True),
        ("synthesize", "extractive answer: EngineBusyError: engine busy: 4 requests in flight", True),
        ("rerank", "fusion order kept: circuit open after 3 failures", True),
    ],
)
def test_only_a_passing_fault_makes_an_answer_degraded(stage: str, detail: str, degraded: bool) -> None:
    """A fallback after the LLM's answer failed its check is settled (cached like a full answer); a timeout, an
    open breaker, a busy engine or a retry cut by the clock is a passing fault (`cache.degraded_ttl_s`)."""
    stages = {"retrieve": StageStatus(status="ok"), stage: StageStatus(status="fallback", detail=detail)}
    assert settled_fallback(detail) is (not degraded and stage == "synthesize")
    response = QueryResponse.model_construct(stages=stages)
    assert response.degraded() is degraded
