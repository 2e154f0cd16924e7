"""The MCP tools over a fake pipeline answer, through the `mcp` package's own in-process client; the key check
in front of the streamable HTTP app. Over HTTP against the real Serve app: tests/integration/test_query_service.py."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from mcp import Client
from starlette.testclient import TestClient

from serve.edge.feedback import FeedbackRecorded
from serve.edge.mcp_tools import MCP_PATH, build_mcp, mcp_app
from serve.errors import BadRequestError, NotFoundError, UnauthorizedError
from serve.types import DocumentList, DocumentOut, QueryRequest, QueryResponse


class FakeFront:
    """Records each request; answers like the pipeline, or refuses a query containing 'refuse'; one key."""

    def __init__(self) -> None:
        self.requests: list[QueryRequest] = []
        self.listings: list[tuple[dict[str, Any], str | None, Any]] = []
        self.ratings: list[dict[str, Any]] = []

    def tenant_of(self, headers: Mapping[str, str]) -> str:
        if headers.get("authorization") != "Bearer k":
            raise UnauthorizedError("unknown API key")
        return "alpha"

    async def answer(self, request: QueryRequest, headers: Mapping[str, str]) -> QueryResponse:
        self.requests.append(request)
        if "refuse" in request.query:
            raise BadRequestError("unknown filter field 'x'")
        no_text = request.mode == "no_text"
        return QueryResponse.model_validate(
            {
                "answer": "" if no_text else "Tenants are filtered in the store [1].",
                "citations": []
                if no_text
                else [{"n": 1, "chunk_id": "c", "doc_id": "d", "title": "t", "source": "s", "score": 0.5}],
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
                        "dense_score": 0.7,
                    }
                ],
                "abstained": False,
                "grounded": not no_text,
                "stages": {"retrieve": {"status": "ok", "ms": 3}},
                "index_version": 2,
                "request_id": "r1",
                "tenant": "alpha",
                "retrieval_query": {"query": request.query},
            }
        )

    async def list_documents(
        self, headers: Mapping[str, str], filters: dict[str, Any], cursor: str | None, limit: Any
    ) -> DocumentList:
        tenant = self.tenant_of(headers)
        if limit == 0:
            raise BadRequestError("limit must be between 1 and 1000")
        self.listings.append((filters, cursor, limit))
        doc = DocumentOut(doc_id="d", title="t", source="s", doc_type="md", year=None, tags=["ops"])
        return DocumentList(tenant=tenant, documents=[doc], next_cursor="c" * 32)

    async def rate_answer(self, headers: Mapping[str, str], body: dict[str, Any]) -> FeedbackRecorded:
        if body["request_id"] != "r1":
            raise NotFoundError(f"no answer with request_id {body['request_id']!r} was served to this key's tenant")
        self.ratings.append(body)
        return FeedbackRecorded(request_id=body["request_id"], rating=body["rating"])


def call(tool: str, arguments: dict[str, Any], answer: FakeFront) -> Any:
    async def go() -> tuple[set[str], Any]:
        async with Client(build_mcp(lambda: answer)) as client:
            listed = await client.list_tools()
            return {t.name for t in listed.tools}, await client.call_tool(tool, arguments)

    names, result = asyncio.run(go())
    assert names == {"search", "ask", "list_documents", "rate_answer"}
    return result


def test_search_is_retrieval_only_with_the_filters_and_depth_given() -> None:
    answer = FakeFront()
    result = call("search", {"query": "tenants", "filters": {"doc_type": "md"}, "top_k": 4}, answer)
    assert not result.is_error
    [request] = answer.requests
    assert (request.mode, request.filters, request.top_k) == ("no_text", {"doc_type": "md"}, 4)
    out = result.structured_content
    assert out["passages"] == [
        {
            "n": 1,
            "doc_id": "d",
            "title": "t",
            "source": "s",
            "section": "",
            "author": "",
            "tags": [],
            "text": "x",
            "score": 0.5,
        }
    ]
    assert out["tenant"] == "alpha" and out["abstained"] is False


def test_ask_answers_with_citations_in_the_default_mode() -> None:
    answer = FakeFront()
    out = call("ask", {"question": "How are tenants kept apart?"}, answer).structured_content
    assert answer.requests[0].mode is None and answer.requests[0].query == "How are tenants kept apart?"
    assert out["answer"].endswith("[1].") and out["citations"][0]["doc_id"] == "d" and out["grounded"]
    assert out["stages"] == {"retrieve": "ok"}


def test_a_refused_query_is_a_tool_error_with_the_status_and_reason() -> None:
    result = call("ask", {"question": "please refuse"}, FakeFront())
    assert result.is_error and "400: unknown filter field" in result.content[0].text


def test_list_documents_pages_with_the_filters_given_and_refuses_a_bad_page() -> None:
    front = FakeFront()
    front.tenant_of = lambda headers: "alpha"  # type: ignore[method-assign]  # the in-process client sends no key

    def list_documents(arguments: dict[str, Any]) -> Any:
        async def go() -> Any:
            async with Client(build_mcp(lambda: front)) as client:
                return await client.call_tool("list_documents", arguments)

        return asyncio.run(go())

    listed = list_documents({"filters": {"tags": "ops"}, "limit": 5})
    assert not listed.is_error and front.listings == [({"tags": "ops"}, None, 5)]
    out = listed.structured_content
    assert out["documents"][0]["doc_id"] == "d" and out["next_cursor"] == "c" * 32 and out["tenant"] == "alpha"
    refused = list_documents({"limit": 0})
    assert refused.is_error and "400: limit must be between 1 and 1000" in refused.content[0].text


def test_rate_answer_rates_the_request_id_ask_gave_and_refuses_an_unknown_one() -> None:
    front = FakeFront()
    rated = call("rate_answer", {"request_id": "r1", "rating": "down", "comment": "wrong page"}, front)
    assert rated.structured_content == {"request_id": "r1", "rating": "down", "recorded": True}
    assert front.ratings == [{"request_id": "r1", "rating": "down", "comment": "wrong page"}]
    unknown = call("rate_answer", {"request_id": "r9", "rating": "up"}, front)
    assert unknown.is_error and "404: no answer with request_id 'r9'" in unknown.content[0].text


def test_the_key_is_checked_before_the_protocol() -> None:
    front = FakeFront()
    app = mcp_app(build_mcp(lambda: front), lambda: front)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with TestClient(app) as client:
        refused = client.post(MCP_PATH, json=hello)
        assert refused.status_code == 401 and refused.json() == {"error": "unknown API key"}
        headers = {"Authorization": "Bearer k", "Accept": "application/json, text/event-stream"}
        assert client.post(MCP_PATH, json=hello, headers=headers).status_code == 200


def test_the_ingress_app_pickles_and_builds_the_mcp_server_in_the_replica() -> None:
    """Serve pickles the ingress app; the MCP server (which does not pickle) is built by the app's lifespan."""
    from ray import cloudpickle
    from ray._common.serialization import pickle_dumps
    from ray.serve._private.utils import ensure_serialization_context

    from serve.edge.ingress import make_ingress_app
    from serve.edge.mcp_tools import serving

    api, _ = make_ingress_app()
    ensure_serialization_context()  # what serve.ingress does with the app it is given
    copy = cloudpickle.loads(pickle_dumps(api, error_msg="the ingress app does not pickle"))
    serving(FakeFront())
    with TestClient(copy) as client:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"Authorization": "Bearer k", "Accept": "application/json, text/event-stream"}
        assert client.post(MCP_PATH, json=hello, headers=headers).status_code == 200
        assert client.post(MCP_PATH, json=hello).status_code == 401
