"""The query path's orchestration: each stage behind a timeout with its fallback, tenant assertion,
abstention, and a per-stage report. Plain asyncio: stages are injected (handles in Serve, fakes in tests)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

from cachetools import TTLCache
from pydantic import ValidationError
from ray.serve.exceptions import BackPressureError

from cluster.config import ResponseMode, ServeConfig
from cluster.labels import PUBLIC
from serve import metrics
from serve.answerability import AnswerabilityModel, abstain_below, answerability_features
from serve.breaker import breakers
from serve.cache import CacheScope, ResponseCache
from serve.errors import BadRequestError, OverloadedError, QueryError, UnavailableError
from serve.extractive import extractive_answer
from serve.roles import Stages
from serve.tracing import record, span
from serve.types import (
    ATTRIBUTED,
    AnswerContext,
    CacheStatus,
    Citation,
    DocumentList,
    DocumentOut,
    Passage,
    PassageOut,
    QueryRequest,
    QueryResponse,
    RetrievalQuery,
    StageStatus,
    StageStatusName,
    StreamReset,
    Synthesis,
    Usage,
)
from serve.usage import account

logger = logging.getLogger(__name__)
T = TypeVar("T")
Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


class StageFailure(Exception):
    """A stage timed out or raised; `reason` says which, for the response and the logs. `retry_after_s` is set
    when its queue was full (Serve's `max_queued_requests`): refused at once, worth retrying shortly."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


async def call_stage(stage: str, call: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """The stage's call in its own span: a deployment it calls records its spans under it."""
    with span(stage) as current:
        try:
            result = await asyncio.wait_for(call(), timeout_s)
        except asyncio.CancelledError:
            record(current, "cancelled")
            raise
        except Exception as exc:
            refusal = client_error(exc)
            if refusal is not None:  # the request's fault (a 4xx), not the stage's: no fallback hides it
                record(current, "refused", detail=refusal.message)
                raise refusal from None
            failure = stage_failure(stage, exc, timeout_s)
            record(current, "error", detail=failure.reason)
            raise failure from exc
        record(current, "ok")
        return result


def client_error(exc: Exception) -> QueryError | None:
    """The 4xx a stage raised for the request itself, out of Ray's wrapper (its `cause`)."""
    cause = getattr(exc, "cause", None)
    error = cause if isinstance(cause, QueryError) else exc
    return error if isinstance(error, QueryError) and error.status_code < 500 else None


def retrieval_error(failure: StageFailure) -> QueryError:
    """Retrieval has no fallback: its failure is the request's, a 503 (with Retry-After when overloaded)."""
    if failure.retry_after_s is not None:
        return OverloadedError(f"retrieval overloaded, retry shortly: {failure.reason}", failure.retry_after_s)
    return UnavailableError(f"retrieval unavailable: {failure.reason}")


def stage_failure(stage: str, exc: Exception, timeout_s: float) -> StageFailure:
    if isinstance(exc, TimeoutError):
        return StageFailure(f"timed out after {timeout_s:g}s")
    if isinstance(exc, BackPressureError):
        retry_after_s = exc.retry_after_s if exc.retry_after_s is not None else 1.0
        return StageFailure(f"overloaded: {exc.message}", retry_after_s)
    logger.warning("stage failed", extra={"stage": stage, "error": repr(exc)})
    return StageFailure(failure_reason(exc))


REASON_MAX_CHARS = 300


def failure_reason(exc: BaseException) -> str:
    """One line for the client: a remote stage's own exception (its whole message on one line: a gRPC error's
    spans several), not Ray's wrapper and traceback (of which the last line is the exception)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        root, text = cause, " ".join(str(cause).split())
    else:
        lines = str(exc).strip().splitlines()
        root, text = exc, lines[-1] if lines else ""
    if len(text) > REASON_MAX_CHARS:
        text = text[: REASON_MAX_CHARS - 1] + "…"
    return f"{type(root).__name__}: {text}".rstrip(": ")


async def emit_tokens(answer: str, emit: Emit | None) -> None:
    """SSE token events for an answer that is already whole (extractive, or from the cache)."""
    if emit:
        for piece in answer.split(" "):
            await emit("token", {"text": piece + " "})


class QueryPipeline:
    def __init__(
        self,
        cfg: ServeConfig,
        stages: Stages,
        cache: ResponseCache | None = None,
        answerability: AnswerabilityModel | None = None,
    ) -> None:
        self._cfg = cfg
        self._stages = stages
        self._cache = cache
        self._answerability = answerability
        self._version: TTLCache[str, int] = TTLCache(1, ttl=cfg.retrieve.index_version_ttl_s)
        self._breakers = breakers(cfg.breaker)

    async def _guarded(self, stage: str, call: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        """`call_stage` behind the stage's circuit breaker: while it is open, the fallback at once."""
        breaker = self._breakers.get(stage)
        if breaker is None:
            return await call_stage(stage, call, timeout_s)
        refusal = breaker.refusal()
        if refusal is not None:
            metrics.count_breaker(stage, "refused")
            raise StageFailure(refusal)
        try:
            result = await call_stage(stage, call, timeout_s)
        except StageFailure:
            if breaker.failed() == "open":
                metrics.count_breaker(stage, "opened")
            raise
        except asyncio.CancelledError:  # the request's deadline, not the stage: a trial may go again
            breaker.trial_in_flight = False
            raise
        breaker.succeeded()
        return result

    async def index_version(self) -> int:
        """Cached here for `index_version_ttl_s`, so a cache hit costs no call to another deployment."""
        version = self._version.get("v")
        if version is None:
            version = await call_stage("cache", self._stages.retriever.index_version, self._cfg.cache.lookup_timeout_s)
            self._version["v"] = version
        return version

    def scope(
        self, request: QueryRequest, tenant: str, filter_expr: str, index_version: int, groups: tuple[str, ...] = ()
    ) -> CacheScope:
        turns = self._cfg.cache.history_turns_in_key
        tail = [t.model_dump() for t in request.history[-turns:]] if turns else []
        switches: list[Any] = [request.top_k or self._cfg.default_top_k, request.rewrite, request.hyde, request.rerank]
        switches.append(self.mode(request))
        if request.neighbours is not None:  # appended only when asked for: older keys stay valid
            switches.append(f"neighbours={request.neighbours}")
        if request.multi_query is not None:
            switches.append(f"multi_query={request.multi_query}")
        if request.merge_siblings is not None:
            switches.append(f"merge_siblings={request.merge_siblings}")
        return CacheScope(tenant, filter_expr, json.dumps(tail), json.dumps(switches), index_version, groups)

    def mode(self, request: QueryRequest) -> ResponseMode:
        """The request's response mode, or the configured default; one not allowed is a `BadRequestError`."""
        allowed = self._cfg.synthesize.response_modes
        mode = request.mode or self._cfg.synthesize.response_mode
        if mode not in allowed:
            raise BadRequestError(f"mode {mode!r} is not allowed; use one of: {', '.join(allowed)}")
        return cast(ResponseMode, mode)

    async def documents(
        self, tenant: str, filter_expr: str, cursor: str | None, limit: int, groups: tuple[str, ...], request_id: str
    ) -> DocumentList:
        """A page of the tenant's documents that `groups` may read; each checked again as a passage is."""
        try:
            page = await call_stage(
                "retrieve",
                lambda: self._stages.retriever.documents(tenant, filter_expr, cursor, limit, groups),
                self._cfg.retrieve.timeout_s,
            )
        except StageFailure as failure:
            raise retrieval_error(failure) from failure
        readable = self._readable_only(page.documents, tenant, groups, request_id)
        return DocumentList(
            tenant=tenant, documents=[DocumentOut.of(d) for d in readable], next_cursor=page.next_cursor
        )

    async def run(
        self,
        request: QueryRequest,
        tenant: str,
        filter_expr: str,
        request_id: str,
        emit: Emit | None = None,
        groups: tuple[str, ...] = (),
    ) -> QueryResponse:
        """`groups`: the caller's access groups (serve/edge/auth.py), whose documents it reads besides public ones."""
        with span("query", tenant=tenant, request_id=request_id, mode=request.mode, stream=request.stream) as root:
            response = await self._answer(request, tenant, filter_expr, request_id, emit, groups)
            for stage, report in response.stages.items():
                root.set_attribute(f"ragc.stage.{stage}", report.status)
            root.set_attribute("ragc.passages", len(response.passages))
            root.set_attribute("ragc.citations", len(response.citations))
            root.set_attribute("ragc.abstained", response.abstained)
            root.set_attribute("ragc.grounded", response.grounded)
            root.set_attribute("ragc.completion_tokens", response.usage.completion_tokens)
        account(response, request.query, self._cfg)
        return response

    async def _answer(
        self,
        request: QueryRequest,
        tenant: str,
        filter_expr: str,
        request_id: str,
        emit: Emit | None,
        groups: tuple[str, ...],
    ) -> QueryResponse:
        if self._cache is None:
            return await self._run(request, tenant, filter_expr, request_id, emit, groups)
        started = time.perf_counter()
        scope, vector = None, None
        cached: dict[str, Any] | None = None
        status: CacheStatus
        try:
            with span("cache.lookup") as lookup:
                scope = self.scope(request, tenant, filter_expr, await self.index_version(), groups)
                cached, status, vector = await self._cache.lookup(
                    scope, request.query, lambda: self._stages.retriever.embed(request.query)
                )
                lookup.set_attribute("ragc.status", status)
        except StageFailure as failure:
            status = "bypass"
            logger.warning("cache scope unavailable", extra={"error": failure.reason})
        metrics.query_metrics().cache.inc(tags={"status": status})
        cache_report = StageStatus(status=status, ms=(time.perf_counter() - started) * 1000)
        if emit:
            await emit("stage", {"stage": "cache", **cache_report.model_dump()})
        if cached is not None:
            try:
                hit = QueryResponse.model_validate(cached)
            except ValidationError as exc:  # an entry of another version: answer afresh, never fail on the cache
                logger.warning("cache entry unreadable, answering afresh", extra={"error": str(exc)[:200]})
            else:
                if hit.degraded():
                    ttl_s = self._cfg.cache.degraded_ttl_s
                    cache_report.detail = f"degraded answer (a stage had fallen back), cached for at most {ttl_s}s"
                return await self._replay(hit, cache_report, request_id, emit)
        response = await self._run(request, tenant, filter_expr, request_id, emit, groups)
        response.stages = {"cache": cache_report, **response.stages}
        if scope is not None:
            self._cache.store(scope, request.query, vector, response.model_dump(mode="json"), response.degraded())
        return response

    @staticmethod
    async def _replay(cached: QueryResponse, report: StageStatus, request_id: str, emit: Emit | None) -> QueryResponse:
        """A cached answer, marked as such; a streaming request still gets its tokens."""
        stages = {name: StageStatus(status="cached") for name in cached.stages if name != "cache"}
        fresh = {"stages": {"cache": report, **stages}, "request_id": request_id, "usage": Usage()}  # costs nothing
        response = cached.model_copy(update=fresh)
        await emit_tokens(response.answer, emit)
        return response

    async def _run(
        self,
        request: QueryRequest,
        tenant: str,
        filter_expr: str,
        request_id: str,
        emit: Emit | None,
        groups: tuple[str, ...] = (),
    ) -> QueryResponse:
        reports: dict[str, StageStatus] = {}

        async def report(stage: str, status: StageStatusName, started: float, detail: str = "") -> None:
            reports[stage] = StageStatus(status=status, ms=(time.perf_counter() - started) * 1000, detail=detail)
            metrics.observe_stage(stage, status, reports[stage].ms / 1000)
            if emit:
                await emit("stage", {"stage": stage, **reports[stage].model_dump()})

        cfg = self._cfg
        top_k = request.top_k or cfg.default_top_k
        want_rewrite = cfg.rewrite.rewrite_default if request.rewrite is None else request.rewrite
        want_hyde = cfg.rewrite.hyde_default if request.hyde is None else request.hyde
        want_paraphrases = cfg.rewrite.multi_query_default if request.multi_query is None else request.multi_query
        tenant_rerank = cfg.rerank.tenants.get(tenant)
        want_rerank = request.rerank if request.rerank is not None else cfg.rerank.rerank_default
        if request.rerank is None and tenant_rerank is not None:
            want_rerank = tenant_rerank
        rerank_off = "off for this tenant (serve.rerank.tenants)" if tenant_rerank is False else "off by default"
        history = [t.model_dump() for t in request.history]

        started = time.perf_counter()
        query, hyde_passage = request.query, None
        paraphrases: tuple[str, ...] = ()
        spent = Usage()  # LLM tokens of the calls that returned (rewrite, HyDE, paraphrases, answers)
        if want_rewrite or want_hyde or want_paraphrases:
            try:
                rewritten = await self._guarded(
                    "rewrite",
                    lambda: self._stages.rewriter.rewrite(
                        request.query, history, want_rewrite, want_hyde, want_paraphrases
                    ),
                    cfg.rewrite.timeout_s,
                )
                query, hyde_passage = rewritten.query or request.query, rewritten.hyde_passage
                paraphrases = tuple(rewritten.paraphrases)
                spent += rewritten.usage
                await report("rewrite", rewritten.status, started, rewritten.detail)
            except StageFailure as failure:
                await report("rewrite", "fallback", started, f"original query used: {failure.reason}")
        else:
            await report("rewrite", "skipped", started, "not requested")

        started = time.perf_counter()
        try:
            retrieved = await call_stage(
                "retrieve",
                lambda: self._stages.retriever.retrieve(tenant, query, filter_expr, hyde_passage, paraphrases, groups),
                cfg.retrieve.timeout_s,
            )
        except StageFailure as failure:
            await report("retrieve", "error", started, failure.reason)
            raise retrieval_error(failure) from failure
        passages = self._readable_only(retrieved.passages, tenant, groups, request_id)
        degraded = "; ".join(f"{arm} {state}" for arm, state in retrieved.arms.items() if state != "ok")
        detail = f"embedded {retrieved.embedded}" + (f"; {degraded}" if degraded else "")
        if paraphrases:
            detail += f"; {retrieved.paraphrases_searched} of {len(paraphrases)} paraphrase(s) searched"
        await report("retrieve", "fallback" if degraded else "ok", started, detail)

        used = RetrievalQuery(query=query, hyde_passage=hyde_passage, paraphrases=list(paraphrases))
        if not passages:
            reports["rerank"] = StageStatus(status="skipped", detail="nothing to rerank")
            why = "no passage above the similarity floor"
            return self._abstain(reports, "floor", why, None, retrieved.index_version, request_id, tenant, used, spent)

        started = time.perf_counter()
        candidates, top_scores = passages, []
        if want_rerank:
            try:
                reranked = await self._guarded(
                    "rerank", lambda: self._stages.reranker.rerank(query, candidates, top_k), cfg.rerank.timeout_s
                )
                passages, top_scores = reranked.passages, reranked.top_scores
                await report("rerank", reranked.status, started, reranked.detail)
            except StageFailure as failure:
                passages = passages[:top_k]
                await report("rerank", "fallback", started, f"fusion order kept: {failure.reason}")
        else:
            passages = passages[:top_k]
            await report("rerank", "skipped", started, "not requested" if request.rerank is False else rerank_off)

        started = time.perf_counter()
        answerable, verdict = self._judge(candidates, top_scores)
        await report("answerability", "skipped" if answerable is None else "ok", started, verdict)
        if answerable is not None and answerable < self._abstain_below():
            why = "the passages are unlikely to answer the question (answerability below the calibrated threshold)"
            return self._abstain(
                reports, "answerability", why, answerable, retrieved.index_version, request_id, tenant, used, spent
            )

        mode = self.mode(request)
        siblings = cfg.synthesize.merge_siblings if request.merge_siblings is None else request.merge_siblings
        sections: dict[str, str] = {}
        if siblings:
            passages, sections = await self._merged(tenant, passages, siblings, report)
        window = cfg.synthesize.neighbours if request.neighbours is None else request.neighbours
        widened = await self._widened(tenant, passages, window, report) if window and mode != "no_text" else {}
        widened |= sections  # a passage that reads its section whole needs no window
        reader = [replace(p, text=widened[p.chunk_id]) if p.chunk_id in widened else p for p in passages]

        started = time.perf_counter()
        streamed = False
        context = AnswerContext(tuple((t["role"], t["content"]) for t in history), query)

        def respond(synthesis: Synthesis) -> QueryResponse:
            public = [p.public(n, widened.get(p.chunk_id)) for n, p in enumerate(passages, start=1)]
            return QueryResponse(
                answer=synthesis.answer,
                citations=[self._citation(public[n - 1], synthesis) for n in synthesis.cited if 1 <= n <= len(public)],
                passages=public,
                abstained=False,
                grounded=synthesis.grounded,
                stages=reports,
                index_version=retrieved.index_version,
                request_id=request_id,
                tenant=tenant,
                retrieval_query=used,
                answerability=answerable,
                usage=spent,
            )

        if mode == "no_text":
            await report("synthesize", "skipped", started, "mode no_text: retrieval only, no LLM call")
            return respond(Synthesis("", [], False, "no_text"))

        async def generate() -> Synthesis:
            nonlocal streamed
            final = None
            async for item in self._stages.synthesizer.synthesize_stream(
                request.query, reader, context=context, mode=mode
            ):
                if isinstance(item, Synthesis):
                    final = item
                elif isinstance(item, StreamReset):
                    if streamed and emit:
                        await emit("reset", {"reason": item.reason})
                    streamed = False
                elif item:
                    streamed = True
                    if emit:
                        await emit("token", {"text": item})
            if final is None:
                raise RuntimeError("synthesis ended without an answer")
            return final

        failure_reason = None
        try:
            synthesis = await self._guarded("synthesize", generate, cfg.synthesize.timeout_s)
            spent += synthesis.usage  # spent even when the answer fails its check and is not served
            self._count_check(synthesis)
            if synthesis.failed_check:
                calls = [synthesis.mode.removeprefix("llm, ")] if synthesis.response_mode != "compact" else []
                failure_reason = "; ".join([synthesis.failed_check, *calls, *self._budget_text(synthesis)])
        except StageFailure as failure:
            failure_reason = failure.reason
        if failure_reason is None:
            await report("synthesize", "ok", started, self._synthesis_detail(synthesis))
            if not streamed:
                await emit_tokens(synthesis.answer, emit)
        else:
            synthesis = extractive_answer(request.query, reader, cfg.synthesize)
            await report("synthesize", "fallback", started, f"extractive answer: {failure_reason}")
            if streamed and emit:
                await emit("reset", {"reason": "generation failed; the extractive answer follows"})
            await emit_tokens(synthesis.answer, emit)
        return respond(synthesis)

    async def _merged(
        self, tenant: str, passages: list[Passage], siblings: int, report: Callable[..., Awaitable[None]]
    ) -> tuple[list[Passage], dict[str, str]]:
        """The passages after auto-merging, and chunk_id -> the section each merged one reads; on failure, the
        passages as they were."""
        started = time.perf_counter()
        cfg = self._cfg
        try:
            merged = await call_stage(
                "merge",
                lambda: self._stages.retriever.merged(tenant, passages, siblings, cfg.synthesize.merge_max_chars),
                cfg.retrieve.timeout_s,
            )
        except StageFailure as failure:
            await report("merge", "fallback", started, f"the passages as retrieved: {failure.reason}")
            return passages, {}
        whole = len(merged.contexts)
        detail = f"{whole} section(s) read whole in place of {whole + merged.folded} passages"
        await report("merge", "ok", started, detail)
        return merged.passages, merged.contexts

    async def _widened(
        self, tenant: str, passages: list[Passage], window: int, report: Callable[..., Awaitable[None]]
    ) -> dict[str, str]:
        """chunk_id -> the text the answer reads for that passage; on failure, the passages alone."""
        started = time.perf_counter()
        try:
            widened = await call_stage(
                "neighbours",
                lambda: self._stages.retriever.neighbours(tenant, passages, window),
                self._cfg.retrieve.timeout_s,
            )
        except StageFailure as failure:
            await report("neighbours", "fallback", started, f"the passages alone: {failure.reason}")
            return {}
        detail = f"{len(widened)} of {len(passages)} passages read with up to {window} neighbouring chunk(s) a side"
        await report("neighbours", "ok", started, detail)
        return widened

    def _abstain_below(self) -> float:
        assert self._answerability is not None
        return abstain_below(self._cfg, self._answerability)

    def _judge(self, candidates: list[Passage], top_scores: list[float]) -> tuple[float | None, str]:
        """The calibrated probability that the passages answer the question (None: the cosine floor alone
        decided), and what the `answerability` stage report says."""
        if self._answerability is None:
            return None, "not calibrated: the cosine floor alone decides"
        cosines = [p.dense_score for p in candidates if p.dense_score is not None]
        features = answerability_features(top_scores, max(cosines, default=None))
        if features is None:
            return None, "no cross-encoder scores (rerank skipped or fell back): the cosine floor alone decides"
        probability = self._answerability.probability(features)
        threshold = self._abstain_below()
        return probability, f"p={probability:.3f} {'<' if probability < threshold else '>='} {threshold:.3f}"

    def _citation(self, passage: PassageOut, synthesis: Synthesis) -> Citation:
        if synthesis.mode == "extractive":  # its sentences are quoted from the passage it cites
            return Citation.of(passage).model_copy(update={"supported": True})
        return Citation.of(passage, synthesis.support.get(passage.n), self._cfg.synthesize.check.min_support)

    @staticmethod
    def _count_check(synthesis: Synthesis) -> None:
        if synthesis.mode == "extractive":
            return
        outcome = "passed" if synthesis.checked else "unchecked"
        if synthesis.failed_check:
            outcome = synthesis.failed_check.split(" ")[0].rstrip(":")
        metrics.query_metrics().answer_checks.inc(tags={"outcome": outcome, "attempts": str(synthesis.attempts)})

    @staticmethod
    def _budget_text(synthesis: Synthesis) -> list[str]:
        if not synthesis.passages_sent:
            return []
        cut = f", {synthesis.passages_cut} cut to fit the prompt budget" if synthesis.passages_cut else ""
        tokens = f" ({synthesis.prompt_tokens} prompt tokens)" if synthesis.prompt_tokens else ""
        sent = f"{synthesis.passages_sent} passage{'s' if synthesis.passages_sent > 1 else ''} sent"
        return [f"{sent}{tokens}{cut}"]

    @staticmethod
    def _synthesis_detail(synthesis: Synthesis) -> str:
        parts = [synthesis.mode, *QueryPipeline._budget_text(synthesis)]
        if synthesis.removed_citations:
            metrics.query_metrics().removed_citations.inc(synthesis.removed_citations)
            parts.append(f"removed {synthesis.removed_citations} citation(s) to passages not sent")
        if synthesis.attributed:
            parts.append(f"{synthesis.attributed} passage(s) {ATTRIBUTED}")
        return "; ".join(parts)

    @staticmethod
    def _readable_only(passages: list[Passage], tenant: str, groups: tuple[str, ...], request_id: str) -> list[Passage]:
        """The tenant and access filters are in the search; this asserts they held. A stranger's passage, or one
        of the tenant's that the caller's groups may not read, is an incident."""
        readable = {PUBLIC, *groups}
        kept = []
        for passage in passages:
            kind: metrics.IncidentKind | None = (
                "tenant_mismatch"
                if passage.tenant_id != tenant
                else "access_mismatch"
                if passage.access and readable.isdisjoint(passage.access)
                else None
            )
            if kind is None:
                kept.append(passage)
                continue
            metrics.query_metrics().incidents.inc(tags={"kind": kind})
            logger.error(
                "isolation incident: passage dropped",
                extra={"request_id": request_id, "tenant": tenant, "chunk_id": passage.chunk_id, "kind": kind},
            )
        return kept

    def _abstain(
        self,
        reports: dict[str, StageStatus],
        signal: str,
        why: str,
        answerable: float | None,
        index_version: int,
        request_id: str,
        tenant: str,
        used: RetrievalQuery,
        usage: Usage,
    ) -> QueryResponse:
        """The abstention answer; the LLM is never called for it (`usage`: what rewriting cost)."""
        metrics.query_metrics().abstentions.inc(tags={"signal": signal})
        reports["synthesize"] = StageStatus(status="skipped", detail=f"abstained: {why}")
        return QueryResponse(
            answer=self._cfg.abstain_answer,
            citations=[],
            passages=[],
            abstained=True,
            grounded=False,
            stages=reports,
            index_version=index_version,
            request_id=request_id,
            tenant=tenant,
            retrieval_query=used,
            answerability=answerable,
            usage=usage,
        )
