"""Feedback on served answers. Every answer leaves a receipt (its question, answer and cited documents) under its
tenant and request id for `serve.feedback.window_s`; `POST /v1/feedback` rates it up or down, with a comment,
into the tenant's feedback stream in Redis, receipt included, which `ragc feedback` reads. A key rates only
its own tenant's answers: another tenant's request id is as unknown as one never served."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cluster.config import FeedbackConfig
from serve import metrics
from serve.edge.text_rules import REQUEST_ID_PATTERN
from serve.errors import BadRequestError, NotFoundError, UnavailableError
from serve.types import QueryResponse

logger = logging.getLogger(__name__)
RECEIPT_PREFIX = "ragc:receipt:"
STREAM_PREFIX = "ragc:feedback:"
COMPLETION_PREFIX = "chatcmpl-"  # the id the OpenAI-compatible API gives an answer: its request id, prefixed
Rating = Literal["up", "down"]
T = TypeVar("T")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(
        description="the answer's `request_id` (or `X-Request-ID`, or a chat completion's `id`)", max_length=80
    )
    rating: Rating
    comment: str = Field(default="", description="what was wrong or right, for the people who read the feedback")


class FeedbackRecorded(BaseModel):
    request_id: str = Field(description="the rated answer's request id")
    rating: Rating
    recorded: bool = True


class CitedDocument(BaseModel):
    n: int
    doc_id: str
    chunk_id: str
    supported: bool | None = None


class Receipt(BaseModel):
    """What was served under a request id: enough to read a rating without the request log."""

    tenant: str
    request_id: str
    at: float
    question: str = Field(default="", description="empty when `serve.feedback.keep_text` is off")
    answer: str = Field(default="", description="empty when `serve.feedback.keep_text` is off")
    abstained: bool
    grounded: bool
    cited: list[CitedDocument]
    synthesize: str | None = Field(default=None, description="the synthesize stage's status: ok, fallback, ...")
    detail: str | None = Field(default=None, description="why synthesis fell back, when it did")
    index_version: int


class FeedbackEntry(BaseModel):
    request_id: str
    rating: Rating
    comment: str
    at: float
    receipt: Receipt


def receipt_of(response: QueryResponse, question: str, keep_text: bool, at: float) -> Receipt:
    synthesize = response.stages.get("synthesize")
    return Receipt(
        tenant=response.tenant,
        request_id=response.request_id,
        at=at,
        question=question if keep_text else "",
        answer=response.answer if keep_text else "",
        abstained=response.abstained,
        grounded=response.grounded,
        cited=[CitedDocument.model_validate(c.model_dump()) for c in response.citations],
        synthesize=synthesize.status if synthesize else None,
        detail=synthesize.detail if synthesize else None,
        index_version=response.index_version,
    )


def answer_id(given: str) -> str:
    """The request id a rating names: a chat completion's id is its request id, prefixed."""
    bare = given.removeprefix(COMPLETION_PREFIX)
    if not REQUEST_ID_PATTERN.match(bare):
        raise BadRequestError(f"request_id {given[:80]!r} is not one this service gives: letters, digits, '_.-'")
    return bare


def receipt_key(tenant: str, request_id: str) -> str:
    return f"{RECEIPT_PREFIX}{tenant}:{request_id}"


def stream_key(tenant: str) -> str:
    return f"{STREAM_PREFIX}{tenant}"


class FeedbackStore(Protocol):
    async def keep(self, receipt: Receipt, ttl_s: int) -> None: ...

    async def receipt(self, tenant: str, request_id: str) -> Receipt | None: ...

    async def add(self, entry: FeedbackEntry, max_entries: int) -> None: ...


class RedisFeedbackStore:
    def __init__(self, url: str, password: str | None, timeout_s: float) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis

        pool = BlockingConnectionPool.from_url(
            url, password=password, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, timeout=timeout_s
        )
        self._redis = Redis(connection_pool=pool)

    async def keep(self, receipt: Receipt, ttl_s: int) -> None:
        await self._redis.set(receipt_key(receipt.tenant, receipt.request_id), receipt.model_dump_json(), ex=ttl_s)

    async def receipt(self, tenant: str, request_id: str) -> Receipt | None:
        raw = await self._redis.get(receipt_key(tenant, request_id))
        return None if raw is None else Receipt.model_validate_json(raw)

    async def add(self, entry: FeedbackEntry, max_entries: int) -> None:
        fields: Any = {"entry": entry.model_dump_json()}
        await self._redis.xadd(stream_key(entry.receipt.tenant), fields, maxlen=max_entries, approximate=True)


class Feedback:
    """The ingress's side: a receipt per served answer, and ratings of them. Without a store (feedback off, or
    no Redis) answers leave nothing and a rating is refused with the reason."""

    def __init__(
        self, cfg: FeedbackConfig, store: FeedbackStore | None, clock: Callable[[], float] = time.time
    ) -> None:
        self._cfg = cfg
        self._store = store if cfg.enabled else None
        self._clock = clock

    async def remember(self, response: QueryResponse, question: str) -> None:
        """Never fails the answer: a receipt Redis did not take is logged, and that answer cannot be rated."""
        if self._store is None:
            return
        receipt = receipt_of(response, question, self._cfg.keep_text, self._clock())
        try:
            await self._store.keep(receipt, self._cfg.window_s)
        except Exception as exc:  # noqa: BLE001 - Redis down or slow: the answer goes out without a receipt
            metrics.count_feedback_receipt("failed")
            logger.warning("answer receipt not kept", extra={"error": repr(exc)[:200]})

    async def rate(self, tenant: str, body: dict[str, Any]) -> FeedbackEntry:
        if self._store is None:
            why = "serve.feedback.enabled is false" if not self._cfg.enabled else "this service runs without Redis"
            raise NotFoundError(f"feedback is off on this service ({why})")
        try:
            asked = FeedbackRequest.model_validate(body)
        except ValidationError as exc:
            where = ", ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
            raise BadRequestError(f"invalid feedback: {where}") from exc
        if len(asked.comment) > self._cfg.max_comment_chars:
            raise BadRequestError(f"comment too long ({len(asked.comment)} > {self._cfg.max_comment_chars} characters)")
        if "\x00" in asked.comment:
            raise BadRequestError("comment contains a NUL character")
        request_id = answer_id(asked.request_id)
        receipt = await _stored(self._store.receipt(tenant, request_id))
        if receipt is None:
            raise NotFoundError(
                f"no answer with request_id {request_id!r} was served to this key's tenant in the last "
                f"{self._cfg.window_s} s (serve.feedback.window_s)"
            )
        entry = FeedbackEntry(
            request_id=request_id, rating=asked.rating, comment=asked.comment, at=self._clock(), receipt=receipt
        )
        await _stored(self._store.add(entry, self._cfg.max_entries_per_tenant))
        metrics.count_feedback(tenant, asked.rating)
        return entry


async def _stored(work: Awaitable[T]) -> T:
    """A rating's Redis call: a failure is a 503 the client may retry, never a rating lost silently."""
    try:
        return await work
    except Exception as exc:
        raise UnavailableError(f"feedback store unavailable: {type(exc).__name__}") from exc


def read_feedback(
    url: str, password: str | None, tenant: str, newest: int | None = None, since_ms: int | None = None
) -> list[FeedbackEntry]:
    """The tenant's feedback, oldest first: only the `newest` ones when given, only those rated from `since_ms`
    (epoch milliseconds: a stream entry's id is the time it was added) when given; for `ragc feedback`."""
    import redis

    first = "-" if since_ms is None else f"{since_ms}-0"
    client = redis.Redis.from_url(url, password=password)
    try:
        rows: Any = (
            client.xrange(stream_key(tenant), min=first)
            if newest is None
            else list(reversed(client.xrevrange(stream_key(tenant), min=first, count=newest)))  # type: ignore[arg-type]
        )
    finally:
        client.close()
    return [FeedbackEntry.model_validate_json(fields[b"entry"]) for _, fields in rows]


def feedback_report(tenant: str, entries: list[FeedbackEntry], rating: Rating | None = None) -> dict[str, Any]:
    """Each rated answer once, by its latest rating (a person may change their mind: `revised` counts those),
    oldest first; `rating` keeps only those rated so."""
    latest: dict[str, FeedbackEntry] = {}
    for entry in entries:
        latest.pop(entry.request_id, None)  # re-inserted: its place is its latest rating's
        latest[entry.request_id] = entry
    counts = {"up": 0, "down": 0}
    for entry in latest.values():
        counts[entry.rating] += 1
    shown = [e for e in latest.values() if rating is None or e.rating == rating]
    return {
        "tenant": tenant,
        "rated": len(latest),
        "ratings": counts,
        "revised": len(entries) - len(latest),
        "feedback": [e.model_dump(mode="json") for e in shown],
    }
