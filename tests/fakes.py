"""Fakes for unit tests only; each satisfies the protocol of the real part it stands in for."""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

from cluster.embedding_cache import EmbeddingCache
from serve.llm.generation import Generated, Piece
from serve.llm.load import EngineLoad
from serve.roles import Stages
from serve.types import Usage


class HashEmbedder:
    """Deterministic bag-of-words vectors: texts sharing words are close. Satisfies `Embedder`."""

    def __init__(self, dim: int = 32, model_id: str = "test/hash") -> None:
        self.dim = dim
        self.model_id = model_id
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in text.lower().split():
                vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out


class DictStore:
    """The catalog's key-value protocol (`ingest_jobs.lease.KeyValueStore`) over a dict."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = data if data is not None else {}

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self.data.pop(key, None)


class DictEmbeddingCache(EmbeddingCache):
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], list[float]] = {}

    def get_many(self, model_id: str, texts: list[str]) -> list[list[float] | None]:
        return [self.data.get((model_id, t)) for t in texts]

    def put_many(self, model_id: str, texts: list[str], vectors: list[list[float]]) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self.data[(model_id, text)] = vector


class DictStoredVectors:
    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def lookup(self, ids: list[str]) -> dict[str, list[float]]:
        return {i: self.vectors[i] for i in ids if i in self.vectors}


class DictWrittenStore:
    """`ingest_jobs.enrich_stage.WrittenStore` in a dict: key -> (tenant, text)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, str]] = {}

    def lookup(self, keys: list[str]) -> dict[str, str]:
        return {k: self.rows[k][1] for k in keys if k in self.rows}

    def store(self, tenants: list[str], keys: list[str], texts: list[str]) -> None:
        self.rows |= {k: (t, x) for t, k, x in zip(tenants, keys, texts, strict=True)}


class EchoGenerator:
    """`ingest_jobs.enrich_stage.TextGenerator` that answers from the prompt: two numbered questions about a
    passage's first word, or "Summary: about <first word>" for a document; records every call's prompts."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(self, prompts: list[list[dict[str, str]]], max_tokens: list[int]) -> list[str]:
        asked = [p[-1]["content"] for p in prompts]
        self.calls.append(asked)
        out = []
        for text in asked:
            kind, body = text.split(": ", 1)
            word = body.split()[0]
            out.append(
                f"Summary: about {word}"
                if kind == "Document"
                else f"1. What is {word} about?\n2. Why does {word} matter?"
            )
        return out


REWRITE_COST = Usage.of(40, 9)  # what the fake engine reports for a rewrite and for an answer
ANSWER_COST = Usage.of(300, 3)


class FakeStages:
    """Plays every role of serve.roles (Rewriter, Retriever, Reranker, Synthesizer); each stage can be
    slowed (`delay_s`), made to fail (`fail`) or have a full queue (`full`: what a Serve handle raises)."""

    def __init__(
        self,
        passages: list,
        delay_s: dict[str, float] | None = None,
        fail: set[str] | None = None,
        arms: dict[str, str] | None = None,
        full: set[str] | None = None,
    ) -> None:
        self.passages = passages
        self.full = full or set()
        self.delay_s = delay_s or {}
        self.fail = fail or set()
        self.arms = arms or {"dense": "ok", "bm25": "ok"}
        self.calls: list[str] = []
        self.version = 3
        self.rerank_scores = [4.0, 1.0, 0.5]  # the cross-encoder's best logits the fake reports
        self.rerank_outside = ""  # set: the question is outside the reranker's domain, and this says why
        self.contexts: list = []  # what each synthesize_stream call was given as its AnswerContext
        self.modes: list = []  # the response mode of each synthesize_stream call
        self.read: list = []  # the passage texts each synthesize_stream call was given
        self.searched: list = []  # (query, paraphrases) of each retrieve call
        self.groups: list = []  # the caller's access groups of each retrieve call
        self.listed: list = []  # (filter_expr, groups) of each documents call

    async def _enter(self, stage: str) -> None:
        import asyncio

        self.calls.append(stage)
        if self.delay_s.get(stage):
            await asyncio.sleep(self.delay_s[stage])
        if stage in self.fail:
            raise RuntimeError(f"{stage} exploded")
        if stage in self.full:
            from ray.serve.exceptions import BackPressureError

            raise BackPressureError(num_queued_requests=4, max_queued_requests=4)

    async def rewrite(self, query, history, rewrite, hyde, multi_query=False):  # type: ignore[no-untyped-def]
        from serve.types import RewriteResult

        await self._enter("rewrite")
        paraphrases = [f"{query} paraphrased"] if multi_query else []
        return RewriteResult(query=query + " rewritten", status="ok", usage=REWRITE_COST, paraphrases=paraphrases)

    async def retrieve(self, tenant, query, filter_expr, hyde_passage, paraphrases=(), groups=()):  # type: ignore[no-untyped-def]
        from serve.types import RetrievalResult

        await self._enter("retrieve")
        self.searched.append((query, tuple(paraphrases)))
        self.groups.append(tuple(groups))
        return RetrievalResult(list(self.passages), index_version=3, arms=dict(self.arms))

    async def rerank(self, query, passages, top_n):  # type: ignore[no-untyped-def]
        from serve.types import Reranked

        await self._enter("rerank")
        if self.rerank_outside:
            return Reranked(passages[:top_n], "skipped", detail=self.rerank_outside)
        return Reranked(list(reversed(passages))[:top_n], "ok", list(self.rerank_scores))

    async def synthesize_stream(self, query, passages, context=None, mode="compact"):  # type: ignore[no-untyped-def]
        """Streams "LLM answer [1]" token by token; `synthesize_midstream` fails after the first token."""
        import asyncio

        from serve.types import Synthesis

        self.contexts.append(context)
        self.modes.append(mode)
        self.read.append([p.text for p in passages])
        await self._enter("synthesize")
        for n, piece in enumerate(["LLM ", "answer ", "[1]"]):
            if n == 1 and "synthesize_midstream" in self.fail:
                raise RuntimeError("engine died mid-answer")
            if n == 1 and self.delay_s.get("synthesize_midstream"):
                await asyncio.sleep(self.delay_s["synthesize_midstream"])
            yield piece
        yield Synthesis(answer="LLM answer [1]", cited=[1], grounded=True, mode="llm", usage=ANSWER_COST)

    async def neighbours(self, tenant, passages, window):  # type: ignore[no-untyped-def]
        """Each passage's text with "(+N)" after it, N = the window."""
        await self._enter("neighbours")
        return {p.chunk_id: f"{p.text} (+{window})" for p in passages}

    async def merged(self, tenant, passages, min_siblings, max_chars):  # type: ignore[no-untyped-def]
        """Passages of one document (`doc_id`) with `min_siblings` or more in the list merge: the first reads
        "<its text> (section of N)" and the others leave the list."""
        from serve.types import Merged

        await self._enter("merged")
        by_doc: dict = {}
        for p in passages:
            by_doc.setdefault(p.doc_id, []).append(p)
        groups = [found for found in by_doc.values() if len(found) >= min_siblings]
        folded = {p.chunk_id for found in groups for p in found[1:]}
        contexts = {found[0].chunk_id: f"{found[0].text} (section of {len(found)})" for found in groups}
        return Merged([p for p in passages if p.chunk_id not in folded], contexts, len(folded))

    async def embed(self, text):  # type: ignore[no-untyped-def]
        await self._enter("embed")
        return HashEmbedder(dim=16).embed([text])[0]

    async def documents(self, tenant, filter_expr, after, limit, groups=()):  # type: ignore[no-untyped-def]
        """`passages` as the documents, in chunk id order after `after`; records (filter_expr, groups)."""
        from serve.types import DocumentPage

        await self._enter("documents")
        self.listed.append((filter_expr, tuple(groups)))
        rest = sorted((p for p in self.passages if not after or p.chunk_id > after), key=lambda p: p.chunk_id)
        return DocumentPage(rest[:limit], rest[limit - 1].chunk_id if len(rest) > limit else None)

    async def index_version(self):  # type: ignore[no-untyped-def]
        await self._enter("index_version")
        return self.version


class ScriptedGenerator:
    """Satisfies serve.generation.TextGenerator: replies with the next scripted text (or raises it when it
    is an exception), streamed word by word; records the messages and params it was given."""

    def __init__(self, replies: list, word_delay_s: float = 0.0) -> None:  # type: ignore[type-arg]
        self.replies = list(replies)
        self.word_delay_s = word_delay_s  # a slow engine: each streamed word takes this long
        self.calls: list[tuple[list[dict[str, str]], object]] = []
        self.abandoned = 0  # streams the caller stopped reading (and closed) before their end
        self.in_flight = 0  # what `load` reports; predicted_s set: a busy engine
        self.predicted_s: float | None = None

    def _next(self, messages, params) -> str:  # type: ignore[no-untyped-def]
        self.calls.append((messages, params))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)

    async def generate(self, messages, params) -> Generated:  # type: ignore[no-untyped-def]
        text = self._next(messages, params)
        return Generated(text, self.usage(messages, text))

    @staticmethod
    def usage(messages, text: str) -> Usage:  # type: ignore[no-untyped-def]
        """One token per whitespace-separated word, as `prompt_tokens` counts them."""
        return Usage.of(sum(len(m["content"].split()) for m in messages), len(text.split()))

    async def ready(self) -> None:
        return None

    async def prompt_tokens(self, prompts):  # type: ignore[no-untyped-def]
        """One token per whitespace-separated word of every message."""
        return [sum(len(m["content"].split()) for m in messages) for messages in prompts]

    async def load(self) -> EngineLoad:
        return EngineLoad(self.in_flight, self.predicted_s)

    async def stream(self, messages, params):  # type: ignore[no-untyped-def]
        text = self._next(messages, params)
        try:
            words = text.split(" ")
            for n, word in enumerate(words, start=1):
                if self.word_delay_s:
                    await asyncio.sleep(self.word_delay_s)
                yield Piece(word + " ", self.usage(messages, " ".join(words[:n])))
        except GeneratorExit:
            self.abandoned += 1
            raise


def fake_stages(fake: FakeStages) -> Stages:
    """One fake playing every role (it records the calls across them)."""
    return Stages(fake, fake, fake, fake)


class MemoryFeedbackStore:
    """serve.edge.feedback's FeedbackStore in a dict: receipts expire on the given clock, as Redis's keys do;
    `down` makes every call fail as an unreachable Redis would."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.receipts: dict[tuple[str, str], tuple[Any, float]] = {}
        self.entries: list[Any] = []
        self.down = False

    def _reachable(self) -> None:
        if self.down:
            raise ConnectionError("Redis is down")

    async def keep(self, receipt: Any, ttl_s: int) -> None:
        self._reachable()
        self.receipts[(receipt.tenant, receipt.request_id)] = (receipt, self.clock() + ttl_s)

    async def receipt(self, tenant: str, request_id: str) -> Any:
        self._reachable()
        kept = self.receipts.get((tenant, request_id))
        return kept[0] if kept and kept[1] > self.clock() else None

    async def add(self, entry: Any, max_entries: int) -> None:
        self._reachable()
        self.entries = [*self.entries, entry][-max_entries:]


def feedback_entry(request_id: str, rating: str, at: float, comment: str = "", tenant: str = "acme") -> Any:
    """A rating of a grounded answer, as the ingress records it."""
    from serve.edge.feedback import FeedbackEntry, Receipt

    receipt = Receipt(
        tenant=tenant,
        request_id=request_id,
        at=at - 5,
        question=f"question {request_id}",
        answer="an answer",
        abstained=False,
        grounded=True,
        cited=[{"n": 1, "doc_id": "tenancy.md", "chunk_id": "c0"}],  # type: ignore[list-item]
        synthesize="ok",
        index_version=3,
    )
    return FeedbackEntry(request_id=request_id, rating=rating, comment=comment, at=at, receipt=receipt)  # type: ignore[arg-type]
