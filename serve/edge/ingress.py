"""HTTP ingress (FastAPI): auth, validation, readiness gate, the end-to-end deadline, SSE streaming; the
OpenAI-compatible chat API and the MCP server ride on the same pipeline."""

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

from cachetools import TTLCache
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.sse import EventSourceResponse, format_sse_event
from pydantic import BaseModel, Field, ValidationError
from starlette.routing import Route

from cluster.config import RagcConfig
from cluster.redis_conn import redis_url
from serve import metrics
from serve.answerability import load_answerability
from serve.cache import open_response_cache
from serve.edge import openai_compat
from serve.edge.auth import Authenticator, Caller
from serve.edge.feedback import Feedback, FeedbackRecorded, FeedbackRequest, RedisFeedbackStore
from serve.edge.filters import compile_filters
from serve.edge.limits import Lease, RedisLimitStore, TenantLimiter
from serve.edge.listing import cursor_of, filters_param, page_size
from serve.edge.mcp_tools import MCP_PATH, McpMount, serving
from serve.edge.text_rules import REQUEST_ID_PATTERN, check_encodable, json_object
from serve.errors import BadRequestError, DeadlineError, NotReadyError, QueryError, RetryLaterError
from serve.pipeline import QueryPipeline
from serve.roles import Stages
from serve.types import DocumentList, QueryRequest, QueryResponse
from serve.usage import send_request_log_to_stderr

logger = logging.getLogger(__name__)
T = TypeVar("T")
READY_RECHECK_S = 2.0
STARTED = int(time.time())  # `created` of the models /v1/models lists


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong, for a person")
    request_id: str


# The body is parsed by `Ingress.parse` (size and content type are refused before it is read), so FastAPI
# does not know the request model: only its schema is declared here. The response is FastAPI's own.
QUERY_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryRequest"}}},
    },
}
CHAT_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}},
    },
}
QUERY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the answer as JSON; with stream=true (or Accept: text/event-stream) SSE events "
        "`stage`, `token`, `reset`, then `final` carrying this object, or `error`"
    },
    **{
        status: {"model": ErrorBody, "description": description}
        for status, description in (
            (400, "bad request"),
            (401, "missing or unknown API key"),
            (413, "body too large"),
            (415, "not JSON"),
            (429, "over the tenant's request rate or requests in flight; Retry-After says when to retry"),
            (503, "not ready or overloaded (both with Retry-After), or retrieval unavailable"),
            (504, "request deadline passed"),
        )
    },
}


DOCUMENTS_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: QUERY_RESPONSES[status] for status in (400, 401, 429, 503, 504)
}
FEEDBACK_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{status: QUERY_RESPONSES[status] for status in (400, 401, 413, 415, 429)},
    404: {"model": ErrorBody, "description": "no such answer for this key's tenant in the window, or feedback off"},
    503: {"model": ErrorBody, "description": "the feedback store (Redis) is unavailable: retry"},
}
FEEDBACK_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FeedbackRequest"}}},
    },
}


def retry_headers(exc: Exception) -> dict[str, str] | None:
    """`Retry-After` (whole seconds, at least 1) for a refusal that says when to come back."""
    if isinstance(exc, RetryLaterError):
        return {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
    return None


def error_response(status: int, message: str, request_id: str, headers: dict[str, str] | None = None) -> JSONResponse:
    metrics.count_request(status)
    body = ErrorBody(error=message, request_id=request_id).model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


def sse(event: str, data: dict[str, Any]) -> bytes:
    return format_sse_event(data_str=json.dumps(data), event=event)


def sse_data(data: dict[str, Any]) -> bytes:
    """An unnamed event, as OpenAI's stream sends them."""
    return format_sse_event(data_str=json.dumps(data))


def chat_error(
    status: int, message: str, request_id: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    metrics.count_request(status)
    body = openai_compat.error_body(status, message, request_id, param)
    return JSONResponse(body, status_code=status, headers=headers)


def _request_id(request: Request) -> str:
    header_id = request.headers.get("x-request-id", "")
    return header_id if REQUEST_ID_PATTERN.match(header_id) else uuid.uuid4().hex


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg')}")
    return "invalid request: " + "; ".join(parts)


class Ingress:
    """Plain class: Serve wraps it with `serve.ingress(api)` in the builder; `stages` are injected."""

    def __init__(self, config: dict[str, Any], stages: Stages, readiness: Any, llm_state: Any = None) -> None:
        self._cfg = RagcConfig.model_validate(config)
        self._scfg = self._cfg.serve
        self._auth = Authenticator(self._scfg.auth, self._scfg.http_host)
        password = self._cfg.redis.password.resolve()
        cache = open_response_cache(self._cfg, redis_url(self._cfg), password)
        self._pipeline = QueryPipeline(self._scfg, stages, cache, load_answerability(self._scfg))
        if self._scfg.request_log.enabled:
            send_request_log_to_stderr()
        self._limiter = self._make_limiter(password)
        self._feedback = self._make_feedback(password)
        self._readiness = readiness
        self._llm_state = llm_state
        self._ready = False  # once ready, always ready: a replica that cannot serve fails its health check
        self._not_ready: TTLCache[str, str | None] = TTLCache(1, ttl=READY_RECHECK_S)  # the last reason, briefly

    def _make_limiter(self, password: str | None) -> TenantLimiter:
        limits, url = self._scfg.limits, redis_url(self._cfg)
        # a lease outlives its request only when its release was lost; then it expires after the deadline
        lease_ttl_s = self._scfg.request_timeout_s + 5.0
        limiter = TenantLimiter(limits, lease_ttl_s, shared=None)
        if limiter.active and url:
            shared = RedisLimitStore(url, password, limits.limiter_redis_timeout_s)
            limiter = TenantLimiter(limits, lease_ttl_s, shared=shared)
        return limiter

    def _make_feedback(self, password: str | None) -> Feedback:
        fcfg, url = self._scfg.feedback, redis_url(self._cfg)
        store = RedisFeedbackStore(url, password, fcfg.redis_timeout_s) if fcfg.enabled and url else None
        return Feedback(fcfg, store)

    async def ready(self) -> tuple[bool, str | None]:
        if self._ready:
            return True, None
        if "reason" in self._not_ready:
            return False, self._not_ready["reason"]
        try:
            ok, reason = await asyncio.wait_for(self._readiness(), self._scfg.retrieve.timeout_s)
        except Exception as exc:  # noqa: BLE001 - readiness failures are reasons, not crashes
            ok, reason = False, f"retrieval stage unreachable: {exc!r}"
        if ok:
            self._ready = True
        else:
            self._not_ready["reason"] = reason
        return ok, reason

    async def read_json(self, request: Request) -> dict[str, Any]:
        """The body as a JSON object; size and content type are refused before it is read."""
        limits = self._scfg.limits
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if ctype not in ("application/json", ""):
            raise _HTTPError(415, f"content type {ctype!r} is not supported; send application/json")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_body_bytes:  # refused before it is read
            raise _HTTPError(413, f"body too large ({declared} bytes > {limits.max_body_bytes})")
        body = await request.body()
        if len(body) > limits.max_body_bytes:
            raise _HTTPError(413, f"body too large ({len(body)} bytes > {limits.max_body_bytes})")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequestError(f"body is not valid UTF-8 (byte {exc.start})") from exc
        return json_object(text, "the body")

    async def parse(self, request: Request) -> QueryRequest:
        data = await self.read_json(request)
        try:
            parsed = QueryRequest.model_validate(data)
        except ValidationError as exc:
            raise BadRequestError(_validation_message(exc)) from exc
        return self.checked(parsed)

    def checked(self, parsed: QueryRequest) -> QueryRequest:
        """The limits every query path enforces, whatever API it came in through."""
        limits = self._scfg.limits
        query = parsed.query.strip()
        if not query:
            raise BadRequestError("query is empty")
        if len(parsed.query) > limits.max_query_chars:
            raise BadRequestError(f"query too long ({len(parsed.query)} > {limits.max_query_chars} characters)")
        if "\x00" in parsed.query:
            raise BadRequestError("query contains a NUL character")
        check_encodable(parsed.query, "query")
        if len(parsed.history) > limits.max_history_turns:
            raise BadRequestError(f"too many history turns ({len(parsed.history)} > {limits.max_history_turns})")
        if any(len(t.content) > limits.max_turn_chars for t in parsed.history):
            raise BadRequestError(f"a history turn is longer than {limits.max_turn_chars} characters")
        for n, turn in enumerate(parsed.history):
            check_encodable(turn.content, f"history turn {n}")
        if parsed.top_k is not None and not 1 <= parsed.top_k <= limits.max_top_k:
            raise BadRequestError(f"top_k must be between 1 and {limits.max_top_k}")
        self._pipeline.mode(parsed)  # an unknown or disallowed mode is refused before any work
        return parsed.model_copy(update={"query": query})

    async def readyz(self, full: bool) -> Response:
        """Ready = retrieval can answer (a dead LLM degrades answers to extractive, it does not take the
        service out of rotation). `?full=1` also waits for the LLM engines (used by `ragc up`)."""
        ok, reason = await self.ready()
        llm = "off"
        if self._llm_state is not None:
            try:
                llm = await asyncio.wait_for(self._llm_state(), 5.0)
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                llm = f"unavailable: {type(exc).__name__}"
        if ok and full and llm not in ("ready", "off"):
            ok, reason = False, f"LLM {llm}"
        body = {"ready": ok, "reason": reason, "llm": llm, "answer_budget": self._scfg.answer_budget()}
        return JSONResponse(body, status_code=200 if ok else 503)

    def _caller(self, request: Request) -> Caller:
        return self.caller_of(request.headers)

    def tenant_of(self, headers: Mapping[str, str]) -> str:
        return self.caller_of(headers).tenant

    def caller_of(self, headers: Mapping[str, str]) -> Caller:
        return self._auth.caller_for(headers.get("authorization"), headers.get("x-api-key"))

    async def answer(self, request: QueryRequest, headers: Mapping[str, str]) -> QueryResponse:
        """A whole query for another API on this ingress (MCP): the key's tenant, the limits, the deadline."""
        caller = self.caller_of(headers)
        parsed = self.checked(request)
        filter_expr = await self._admit(parsed)
        lease = await self._limiter.admit(caller.tenant)
        try:
            result = await self._run_with_deadline(parsed, caller, filter_expr, uuid.uuid4().hex)
        finally:
            await lease.release()
        metrics.count_request(200)
        return result

    async def list_documents(
        self,
        headers: Mapping[str, str],
        filters: dict[str, Any],
        cursor: str | None,
        limit: Any,
        request_id: str | None = None,
    ) -> DocumentList:
        """A page of the documents the key may read in its tenant (its groups' and the public ones), under the
        same limits and deadline as a query; the MCP tool `list_documents` calls this too."""
        caller = self.caller_of(headers)
        size = page_size(limit, self._scfg.limits.max_documents_page)
        after = cursor_of(cursor)
        filter_expr = await self._admit_filters(filters)
        lease = await self._limiter.admit(caller.tenant)
        try:
            listing = self._pipeline.documents(
                caller.tenant, filter_expr, after, size, caller.groups, request_id or uuid.uuid4().hex
            )
            return await self._within_deadline(listing)
        finally:
            await lease.release()

    async def handle_documents(self, request: Request) -> Response:
        request_id = _request_id(request)
        params = request.query_params
        try:
            filters = filters_param(params.get("filters"))
            listed = await self.list_documents(
                request.headers, filters, params.get("cursor"), params.get("limit"), request_id
            )
        except QueryError as exc:
            return error_response(exc.status_code, exc.message, request_id, retry_headers(exc))
        metrics.count_request(200)
        return JSONResponse(listed.model_dump(mode="json"), headers={"X-Request-ID": request_id})

    async def rate_answer(self, headers: Mapping[str, str], body: dict[str, Any]) -> FeedbackRecorded:
        """A rating of one of the key's tenant's answers, under its limits; the MCP tool `rate_answer` too."""
        caller = self.caller_of(headers)
        lease = await self._limiter.admit(caller.tenant)
        try:
            entry = await self._feedback.rate(caller.tenant, body)
        finally:
            await lease.release()
        return FeedbackRecorded(request_id=entry.request_id, rating=entry.rating)

    async def handle_feedback(self, request: Request) -> Response:
        request_id = _request_id(request)
        try:
            self._caller(request)  # a missing key is a 401 before the body is read
            recorded = await self.rate_answer(request.headers, await self.read_json(request))
        except _HTTPError as exc:
            return error_response(exc.status, exc.message, request_id)
        except QueryError as exc:
            return error_response(exc.status_code, exc.message, request_id, retry_headers(exc))
        metrics.count_request(200)
        return JSONResponse(recorded.model_dump(), headers={"X-Request-ID": request_id})

    async def _admit(self, parsed: QueryRequest) -> str:
        return await self._admit_filters(parsed.filters)

    async def _admit_filters(self, filters: dict[str, Any]) -> str:
        """The compiled filter expression, once the service is ready to answer."""
        filter_expr = compile_filters(filters, self._scfg.filters, self._scfg.limits)
        ok, reason = await self.ready()
        if not ok:
            raise NotReadyError(f"service not ready: {reason}")
        return filter_expr

    async def handle_query(self, request: Request) -> Response:
        request_id = _request_id(request)
        lease: Lease | None = None
        try:
            caller = self._caller(request)
            parsed = await self.parse(request)
            filter_expr = await self._admit(parsed)
            lease = await self._limiter.admit(caller.tenant)
            wants_stream = parsed.stream or "text/event-stream" in request.headers.get("accept", "")
            if wants_stream:
                stream, lease = self._stream(parsed, caller, filter_expr, request_id, lease), None  # it releases
                return EventSourceResponse(stream, headers={"X-Request-ID": request_id, "Cache-Control": "no-cache"})
            result = await self._run_with_deadline(parsed, caller, filter_expr, request_id)
        except _HTTPError as exc:
            return error_response(exc.status, exc.message, request_id)
        except QueryError as exc:
            return error_response(exc.status_code, exc.message, request_id, retry_headers(exc))
        finally:
            if lease is not None:
                await lease.release()
        metrics.count_request(200)
        return JSONResponse(result.model_dump(mode="json"), headers={"X-Request-ID": request_id})

    async def _run_with_deadline(
        self, parsed: QueryRequest, caller: Caller, filter_expr: str, request_id: str, emit: Any = None
    ) -> QueryResponse:
        result = await self._within_deadline(
            self._pipeline.run(parsed, caller.tenant, filter_expr, request_id, emit, groups=caller.groups)
        )
        await self._feedback.remember(result, parsed.query)
        return result

    async def _within_deadline(self, work: Awaitable[T]) -> T:
        deadline = self._scfg.request_timeout_s
        try:
            return await asyncio.wait_for(work, deadline)
        except TimeoutError as exc:
            raise DeadlineError(f"request deadline of {deadline:g}s passed") from exc

    def chat_models(self) -> dict[str, str | None]:
        return openai_compat.models(list(self._scfg.synthesize.response_modes))

    def model_list(self) -> dict[str, Any]:
        return openai_compat.model_list(list(self._scfg.synthesize.response_modes), STARTED)

    async def handle_chat(self, request: Request) -> Response:
        """`POST /v1/chat/completions`: the same pipeline, keys, limits and filters as `/v1/query`."""
        request_id = _request_id(request)
        lease: Lease | None = None
        try:
            caller = self._caller(request)
            chat = openai_compat.parse_chat(await self.read_json(request))
            parsed = self.checked(openai_compat.to_query(chat, self.chat_models()))
            filter_expr = await self._admit(parsed)
            lease = await self._limiter.admit(caller.tenant)
            if chat.stream:
                stream = self._chat_stream(parsed, chat.model, caller, filter_expr, request_id, lease)
                lease = None  # the stream releases it
                return EventSourceResponse(stream, headers={"X-Request-ID": request_id, "Cache-Control": "no-cache"})
            result = await self._run_with_deadline(parsed, caller, filter_expr, request_id)
        except _HTTPError as exc:
            return chat_error(exc.status, exc.message, request_id)
        except QueryError as exc:
            param = getattr(exc, "param", None)
            return chat_error(exc.status_code, exc.message, request_id, param, retry_headers(exc))
        finally:
            if lease is not None:
                await lease.release()
        metrics.count_request(200)
        return JSONResponse(openai_compat.completion(result, chat.model), headers={"X-Request-ID": request_id})

    async def _chat_stream(
        self, parsed: QueryRequest, model: str, caller: Caller, filter_expr: str, request_id: str, lease: Lease
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        yield sse_data(openai_compat.chunk(request_id, model, created, {"role": "assistant", "content": ""}))
        async for event, data in self._events(parsed, caller, filter_expr, request_id, lease):
            if event == "final":
                result = QueryResponse.model_validate(data)
                for piece in openai_compat.answer_chunks(result, model, created):
                    yield sse_data(piece)
            elif event == "error":
                yield sse_data(openai_compat.error_body(data["status"], data["error"], request_id))
        yield format_sse_event(data_str="[DONE]")

    async def _stream(
        self, parsed: QueryRequest, caller: Caller, filter_expr: str, request_id: str, lease: Lease
    ) -> AsyncIterator[bytes]:
        async for event, data in self._events(parsed, caller, filter_expr, request_id, lease):
            yield sse(event, data)

    async def _events(
        self, parsed: QueryRequest, caller: Caller, filter_expr: str, request_id: str, lease: Lease
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The pipeline's events as they happen (`stage`, `token`, `reset`), ending with `final` or `error`;
        the tenant's lease on a request in flight is held until then."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

        async def emit(event: str, data: dict[str, Any]) -> None:
            await queue.put((event, data))

        async def produce() -> None:
            try:
                result = await self._run_with_deadline(parsed, caller, filter_expr, request_id, emit)
                metrics.count_request(200)
                await queue.put(("final", result.model_dump(mode="json")))
            except QueryError as exc:
                metrics.count_request(exc.status_code)
                await queue.put(("error", {"status": exc.status_code, "error": exc.message, "request_id": request_id}))

        task = asyncio.create_task(produce())
        try:
            while True:
                event, data = await queue.get()
                yield event, data
                if event in ("final", "error"):
                    break
        finally:
            task.cancel()
            await lease.release()


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def make_ingress_app() -> tuple[FastAPI, type[Ingress]]:
    """A fresh FastAPI app and the class whose methods are its routes; Serve's class-based ingress
    takes the routes out of the app it is given, so every application build needs its own pair."""
    mcp = McpMount()
    api = FastAPI(
        lifespan=mcp.lifespan,
        title="ragc query API",
        version="1",
        description="Retrieval-augmented answers with citations, per tenant. Send an API key as "
        "`Authorization: Bearer <key>` or `X-API-Key`.",
    )

    class IngressRoutes(Ingress):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            serving(self)  # the MCP tools answer through this replica's pipeline

        @api.post("/v1/query", openapi_extra=QUERY_OPENAPI, response_model=QueryResponse, responses=QUERY_RESPONSES)
        async def query(self, request: Request) -> Response:
            return await self.handle_query(request)

        @api.post("/v1/chat/completions", response_model=None, tags=["openai"], openapi_extra=CHAT_OPENAPI)
        async def chat_completions(self, request: Request) -> Response:
            """OpenAI-compatible: messages in, `chat.completion` (or its SSE chunks) out; citations, passages
            and stages in the `ragc` extension field."""
            return await self.handle_chat(request)

        @api.get("/v1/documents", response_model=DocumentList, responses=DOCUMENTS_RESPONSES)
        async def documents(
            self,
            request: Request,
            # text, so that a bad value is this API's 400 (with its reason) and not FastAPI's 422
            limit: str | None = Query(None, description="documents per page (default 100, at most max_documents_page)"),
            cursor: str | None = Query(None, description="a previous page's next_cursor"),
            filters: str | None = Query(None, description='the JSON object /v1/query takes: {"tags": "security"}'),
        ) -> Response:
            """The documents this key may read, a page at a time (`limit`, default 100), in a stable order:
            pass `next_cursor` back as `cursor` for the next page. `filters`: the JSON object `/v1/query` takes."""
            del limit, cursor, filters  # declared for the OpenAPI schema; read (and checked) from the request
            return await self.handle_documents(request)

        @api.post(
            "/v1/feedback",
            response_model=FeedbackRecorded,
            responses=FEEDBACK_RESPONSES,
            openapi_extra=FEEDBACK_OPENAPI,
        )
        async def feedback(self, request: Request) -> Response:
            """Rate a served answer up or down, with a comment, by its `request_id` (within
            `serve.feedback.window_s` of the answer, and only one served to this key's tenant)."""
            return await self.handle_feedback(request)

        @api.get("/v1/models", tags=["openai"])
        async def list_models(self) -> dict[str, Any]:
            """OpenAI-compatible: `ragc` (the default response mode) and `ragc-<mode>` per allowed mode."""
            return self.model_list()

        @api.get("/healthz")
        async def healthz(self) -> dict[str, str]:
            return {"status": "ok"}

        @api.get("/readyz", response_model=None)
        async def ready_route(self, full: bool = False) -> Response:
            return await self.readyz(full)

    # a route for the exact path, not a mount at "/": Serve re-adds the class's routes after it
    api.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))

    def openapi() -> dict[str, Any]:
        if api.openapi_schema:
            return api.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (QueryRequest, openai_compat.ChatRequest, FeedbackRequest):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        api.openapi_schema = schema
        return schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api, IngressRoutes
