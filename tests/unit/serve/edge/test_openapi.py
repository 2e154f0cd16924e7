"""The API contract: OpenAPI is generated from the models the ingress returns, not written by hand."""

from __future__ import annotations

from serve.edge.ingress import make_ingress_app
from serve.types import QueryResponse


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
