"""The data contract between query stages: one `Passage` type, per-stage reports, the API models."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cluster.config import MAX_NEIGHBOURS, MergeSiblings

StageStatusName = Literal["ok", "fallback", "skipped", "cached", "error"]  # what a query stage did
CacheStatus = Literal["hit_l1", "hit_l2", "hit_semantic", "miss", "bypass", "off"]  # what the cache lookup found
# The LLM's own answer failed its check (serve/answer_check.py's reasons) and had its retry: the extractive
# answer is what this model gives for these passages, not a passing fault. A check cut short by the clock is
# not settled: with time the retry might pass.
SETTLED_FALLBACK = re.compile(r"^extractive answer: (degenerate|uncited claim|unsupported claim)")
CUT_BY_THE_CLOCK = ("ran out of time", "no time to retry")
ATTRIBUTED = "cited by attribution"  # in the synthesize stage's detail when attribution added citations


class Usage(BaseModel):
    """LLM tokens a request cost, as the engine counted them: prompts (chat template included) and generated
    text, over every LLM call (rewrite, HyDE, each answer attempt, one the stage stopped reading early up to
    where it stopped). A cached answer costs nothing; a stage that timed out reports nothing."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage.of(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass
class Passage:
    chunk_id: str
    doc_id: str
    tenant_id: str
    text: str
    title: str = ""
    source: str = ""
    section: str = ""
    doc_type: str = ""
    year: int = 0
    author: str = ""
    tags: tuple[str, ...] = ()
    access: tuple[str, ...] = ()  # the document's access groups (empty: not stored, in an older collection)
    score: float = 0.0
    dense_score: float | None = None
    rerank_score: float | None = None
    chunk_index: int = 0  # its place in its document: neighbour expansion reads the chunks around it

    def public(self, n: int, context: str | None = None) -> PassageOut:
        return PassageOut(
            n=n,
            chunk_id=self.chunk_id,
            doc_id=self.doc_id,
            title=self.title,
            source=self.source,
            section=self.section,
            author=self.author,
            tags=list(self.tags),
            text=self.text,
            score=round(self.score, 6),
            dense_score=None if self.dense_score is None else round(self.dense_score, 6),
            context=context,
        )


@dataclass(frozen=True)
class DocumentPage:
    """One page of a tenant's documents (each as its first chunk, without text), in chunk id order."""

    documents: list[Passage]
    next_cursor: str | None  # the last chunk id of this page when there are more; None: this was the last


@dataclass
class RetrievalResult:
    passages: list[Passage]
    index_version: int
    arms: dict[str, str] = field(default_factory=dict)  # arm -> "ok" | error reason
    dropped_below_floor: int = 0
    embedded: str = "query"  # what the dense arm embedded: query, query+hyde or hyde
    paraphrases_searched: int = 0  # multi-query: paraphrases whose searches were fused in

    @property
    def degraded(self) -> bool:
        return any(v != "ok" for v in self.arms.values())


@dataclass
class Reranked:
    passages: list[Passage]  # the top_n in reranked order
    status: StageStatusName
    top_scores: list[float] = field(default_factory=list)  # best cross-encoder logits of every scored candidate
    detail: str = ""

    @property
    def scored(self) -> bool:
        return bool(self.top_scores)


@dataclass(frozen=True)
class Merged:
    """Auto-merging's outcome (serve/merging.py)."""

    passages: list[Passage]  # in their order, each merged section's later passages left out
    contexts: dict[str, str] = field(default_factory=dict)  # chunk_id of each section's first passage -> section
    folded: int = 0  # passages left out: their text is in a merged section


@dataclass
class RewriteResult:
    query: str
    hyde_passage: str | None = None
    status: StageStatusName = "skipped"
    detail: str = ""
    usage: Usage = field(default_factory=Usage)
    paraphrases: list[str] = field(default_factory=list)  # multi-query: searched beside the query


@dataclass
class Synthesis:
    answer: str
    cited: list[int]
    grounded: bool  # every claim cited and supported (an extractive answer quotes its passages: always)
    mode: str
    removed_citations: int = 0
    support: dict[int, float] = field(default_factory=dict)  # passage n -> the support it gave (checked answers)
    failed_check: str | None = None  # why the answer must not be served (the pipeline falls back)
    attempts: int = 1
    checked: bool = False  # went through serve/answer_check.py
    attributed: int = 0  # passages cited by post-hoc attribution, not by the model
    passages_sent: int = 0  # the first passages_sent of those given went into the prompt (0: not counted)
    passages_cut: int = 0  # the rest: cut to fit the engine's context
    prompt_tokens: int = 0  # what the prompt with those passages cost, by the engine's tokenizer
    llm_calls: int = 0
    response_mode: str = "compact"
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class AnswerContext:
    """What the answer may read besides the question and passages: the conversation so far, and the query
    that was actually searched when a rewrite changed it."""

    history: tuple[tuple[str, str], ...] = ()  # (role, content), oldest first
    retrieval_query: str | None = None


@dataclass(frozen=True)
class StreamReset:
    """Sent mid-stream when the text streamed so far is withdrawn (it failed the answer check)."""

    reason: str


SynthesisItem = str | Synthesis | StreamReset  # what a synthesis stream yields: text, withdrawals, the end


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant", "system"]
    content: str


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="the question")
    history: list[Turn] = Field(default_factory=list, description="earlier turns, oldest first")
    filters: dict[str, Any] = Field(default_factory=dict, description="{field: value | {op: value}}")
    top_k: int | None = Field(default=None, description="passages used for the answer")
    rewrite: bool | None = None
    hyde: bool | None = None
    rerank: bool | None = None
    multi_query: bool | None = Field(
        default=None,
        description="the LLM proposes paraphrases searched beside the question, fused with it weighted highest "
        "(default: serve.rewrite.multi_query_default)",
    )
    neighbours: int | None = Field(
        default=None,
        ge=0,
        le=MAX_NEIGHBOURS,
        description="chunks of the same document on each side of a passage that the answer reads with it "
        "(default: serve.synthesize.neighbours)",
    )
    merge_siblings: MergeSiblings | None = Field(
        default=None,
        description="when at least this many passages come from one section of a document, the answer reads "
        "the section whole in place of them (default: serve.synthesize.merge_siblings; 0 = off)",
    )
    mode: str | None = Field(
        default=None,
        description="response mode: compact, refine, tree_summarize, accumulate or no_text (retrieval only); "
        "default serve.synthesize.response_mode, refused with 400 when not in serve.synthesize.response_modes",
    )
    stream: bool = False


class StageStatus(BaseModel):
    """What one stage did for this request, and how long it took; `cache` reports a cache status instead."""

    status: StageStatusName | CacheStatus
    ms: float = 0.0
    detail: str | None = Field(default=None, description="why it fell back, what it used; null when plain")

    @field_validator("ms")
    @classmethod
    def _rounded(cls, ms: float) -> float:
        return round(ms, 2)

    @field_validator("detail")
    @classmethod
    def _absent_when_empty(cls, detail: str | None) -> str | None:
        return detail or None


class PassageOut(BaseModel):
    n: int = Field(description="the number the answer cites as [n]")
    chunk_id: str
    doc_id: str
    title: str
    source: str
    section: str
    author: str = Field(default="", description='the document\'s declared author ("": none, or not stored)')
    tags: list[str] = Field(default_factory=list, description="the document's declared tags")
    text: str
    score: float = Field(description="fusion (or rerank) score: an order, not a probability")
    dense_score: float | None = Field(description="cosine of the question and the chunk")
    context: str | None = Field(
        default=None,
        description="what the answer read for this passage: its section whole (merge_siblings), or the passage "
        "widened with its neighbouring chunks (neighbours > 0); null: the answer read `text`",
    )


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    source: str = Field(description="where it was read from (path or URL)")
    doc_type: str
    year: int | None = Field(description="the declared or dated year; null: none")
    author: str = Field(default="", description='the declared author ("": none, or not stored)')
    tags: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, first_chunk: Passage) -> DocumentOut:
        p = first_chunk
        return cls(
            doc_id=p.doc_id,
            title=p.title,
            source=p.source,
            doc_type=p.doc_type,
            year=p.year or None,
            author=p.author,
            tags=list(p.tags),
        )


class DocumentList(BaseModel):
    tenant: str
    documents: list[DocumentOut] = Field(description="the documents this key may read, in a stable order")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: this was the last")


class Citation(BaseModel):
    n: int
    chunk_id: str
    doc_id: str
    title: str
    source: str
    score: float
    supported: bool | None = Field(
        default=None, description="the answer check found the claims citing it supported (null: not checked)"
    )
    support: float | None = Field(
        default=None, description="best cosine between a claim citing it and one of its sentences"
    )

    @classmethod
    def of(cls, passage: PassageOut, support: float | None = None, min_support: float | None = None) -> Citation:
        fields = passage.model_dump(include=set(cls.model_fields))
        if support is not None and min_support is not None:
            fields |= {"support": round(support, 4), "supported": support >= min_support}
        return cls.model_validate(fields)


class RetrievalQuery(BaseModel):
    query: str = Field(description="what was searched: the question, or its rewrite")
    hyde_passage: str | None = Field(default=None, description="the hypothetical passage embedded with it")
    paraphrases: list[str] = Field(default_factory=list, description="multi-query: searched beside it")


class QueryResponse(BaseModel):
    """What `/v1/query` returns (and the `final` event of a stream carries); the response cache stores it as JSON."""

    answer: str
    citations: list[Citation]
    passages: list[PassageOut]
    abstained: bool
    grounded: bool = Field(
        description="every claim of the answer is cited and its cited passage supports it (the answer check); an "
        "extractive answer quotes its passages"
    )
    stages: dict[str, StageStatus] = Field(
        description="cache, rewrite, retrieve, rerank, answerability, merge and neighbours (when asked for), "
        "synthesize, in order"
    )
    index_version: int
    request_id: str
    tenant: str
    retrieval_query: RetrievalQuery
    answerability: float | None = Field(
        default=None,
        description="calibrated probability that the passages answer the question; null when the cosine floor "
        "alone decided (no calibration, or no cross-encoder scores)",
    )
    usage: Usage = Field(default_factory=Usage, description="LLM tokens this answer cost (none when cached)")

    def degraded(self) -> bool:
        """A stage fell back: cached only briefly (`cache.degraded_ttl_s`), so a passing fault does not outlive
        itself while a repeated question during an overload is still answered from the cache. An answer that
        fell back because the LLM's answer failed its check is settled, not degraded: asking again would
        generate the same answer and fail the same way."""
        return any(
            s.status in ("fallback", "error") and not (name == "synthesize" and settled_fallback(s.detail))
            for name, s in self.stages.items()
        )


def settled_fallback(detail: str | None) -> bool:
    return bool(detail and SETTLED_FALLBACK.match(detail) and not any(cut in detail for cut in CUT_BY_THE_CLOCK))
