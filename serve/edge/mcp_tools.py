"""MCP server (the `mcp` package, streamable HTTP) mounted on the ingress at `/mcp`: tools `search` (passages
with citation numbers), `ask` (a cited answer), `list_documents` (what the key may read) and `rate_answer`
(feedback on an answer) over the same pipeline, keys, tenants, filters and limits as `/v1/query`.

The API key is checked before the MCP protocol sees the request (401 with the reason, as on every other
route), and each tool call takes its tenant from the same headers. Stateless and JSON responses: any ingress
replica can answer any call, which is what Serve's load balancing needs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from serve.edge.feedback import FeedbackRecorded
from serve.errors import QueryError
from serve.types import DocumentList, QueryRequest, QueryResponse

MCP_PATH = "/mcp"


class QueryFront(Protocol):
    """What the tools need from the ingress replica that serves them."""

    def tenant_of(self, headers: Mapping[str, str]) -> str: ...  # UnauthorizedError for a bad key

    async def answer(self, request: QueryRequest, headers: Mapping[str, str]) -> QueryResponse: ...

    async def list_documents(
        self, headers: Mapping[str, str], filters: dict[str, Any], cursor: str | None, limit: Any
    ) -> DocumentList: ...

    async def rate_answer(self, headers: Mapping[str, str], body: dict[str, Any]) -> FeedbackRecorded: ...


_REPLICA: dict[str, QueryFront] = {}  # the ingress of this Serve replica (one per replica process)


def serving(front: QueryFront) -> None:
    """Called by the ingress when Serve builds it in this replica."""
    _REPLICA["front"] = front


def this_replica() -> QueryFront:
    return _REPLICA["front"]


def build_mcp(front: Callable[[], QueryFront] = this_replica) -> MCPServer:
    """`front` is looked up per call: the ingress replica that serves the request."""
    server: MCPServer = MCPServer(
        "ragc",
        instructions="Search a tenant's documents and get answers that cite them. Cite passages as [n].",
    )

    async def run(request: QueryRequest, ctx: Context) -> QueryResponse:
        try:
            return await front().answer(request, ctx.headers or {})
        except QueryError as exc:
            raise ToolError(f"{exc.status_code}: {exc.message}") from exc

    @server.tool(description="Search the tenant's documents. Returns the best passages, numbered for citing as [n].")
    async def search(
        query: str, ctx: Context, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        out = await run(QueryRequest(query=query, filters=filters or {}, top_k=top_k, mode="no_text"), ctx)
        passages = [
            p.model_dump(include={"n", "doc_id", "title", "source", "section", "author", "tags", "text", "score"})
            for p in out.passages
        ]
        return {"passages": passages, "abstained": out.abstained, "tenant": out.tenant, "request_id": out.request_id}

    @server.tool(description="Answer a question from the tenant's documents, citing passages as [n].")
    async def ask(
        question: str, ctx: Context, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        out = await run(QueryRequest(query=question, filters=filters or {}, top_k=top_k), ctx)
        return {
            "answer": out.answer,
            "citations": [c.model_dump() for c in out.citations],
            "grounded": out.grounded,
            "abstained": out.abstained,
            "stages": {name: stage.status for name, stage in out.stages.items()},
            "tenant": out.tenant,
            "request_id": out.request_id,
        }

    @server.tool(
        description="List the tenant's documents this key may read (title, source, year, author, tags), a page at "
        "a time: pass next_cursor back as cursor for the next page."
    )
    async def list_documents(
        ctx: Context, filters: dict[str, Any] | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        try:
            listed = await front().list_documents(ctx.headers or {}, filters or {}, cursor, limit)
        except QueryError as exc:
            raise ToolError(f"{exc.status_code}: {exc.message}") from exc
        return listed.model_dump(mode="json")

    @server.tool(
        description="Rate an answer of `ask` (its request_id) up or down, with an optional comment saying what was "
        "wrong or right: the service's operators read these ratings."
    )
    async def rate_answer(request_id: str, rating: str, ctx: Context, comment: str = "") -> dict[str, Any]:
        body = {"request_id": request_id, "rating": rating, "comment": comment}
        try:
            recorded = await front().rate_answer(ctx.headers or {}, body)
        except QueryError as exc:
            raise ToolError(f"{exc.status_code}: {exc.message}") from exc
        return recorded.model_dump()

    return server


def mcp_app(server: MCPServer, front: Callable[[], QueryFront] = this_replica) -> Starlette:
    # Host/Origin checks (DNS-rebinding protection) are off: every call needs an API key, and with auth off
    # the service only listens on loopback (serve/edge/auth.py), as for the other routes.
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.add_middleware(KeyRequired, front=front)
    return app


class KeyRequired:
    """401 with the reason before the MCP protocol runs, as every other route answers a bad key."""

    def __init__(self, app: ASGIApp, front: Callable[[], QueryFront]) -> None:
        self.app = app
        self.front = front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.front().tenant_of(Headers(scope=scope))
            except QueryError as exc:
                await JSONResponse({"error": exc.message}, status_code=exc.status_code)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class McpMount:
    """The MCP app as mounted on the ingress's FastAPI app. Built in the replica when the app starts (its
    `lifespan`), not with the app: Serve pickles the ingress app, and the MCP server holds state that
    does not pickle (its request-state cipher)."""

    def __init__(self) -> None:
        self._app: Starlette | None = None

    @asynccontextmanager
    async def lifespan(self, _: Any) -> AsyncIterator[None]:
        server = build_mcp()
        self._app = mcp_app(server)
        async with server.session_manager.run():  # the task group every streamable HTTP request runs in
            yield
        self._app = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            await JSONResponse({"error": "the MCP server is not running"}, status_code=503)(scope, receive, send)
            return
        await self._app(scope, receive, send)
