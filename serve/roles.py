"""One small contract per query role. The pipeline sees the stages only through these: deployment handles in
Serve (`serve/app.py`), fakes in unit tests, the plain stage classes anywhere else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from cluster.config import ResponseMode
from serve.types import (
    AnswerContext,
    DocumentPage,
    Merged,
    Passage,
    Reranked,
    RetrievalResult,
    RewriteResult,
    SynthesisItem,
)


class Rewriter(Protocol):
    async def rewrite(
        self, query: str, history: list[dict[str, str]], rewrite: bool, hyde: bool, multi_query: bool = False
    ) -> RewriteResult:
        """A self-contained query from the conversation, a hypothetical passage and/or paraphrases; or why not."""
        ...


class Retriever(Protocol):
    async def retrieve(
        self,
        tenant: str,
        query: str,
        filter_expr: str,
        hyde_passage: str | None,
        paraphrases: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> RetrievalResult:
        """`groups`: the caller's access groups (serve/edge/auth.py)."""
        ...

    async def embed(self, text: str) -> list[float]:
        """The question's vector (the semantic cache's key)."""
        ...

    async def neighbours(self, tenant: str, passages: list[Passage], window: int) -> dict[str, str]:
        """chunk_id -> the passage's text widened with `window` chunks of its document on each side."""
        ...

    async def merged(self, tenant: str, passages: list[Passage], min_siblings: int, max_chars: int) -> Merged:
        """The passages with each section `min_siblings` or more of them come from read whole (serve/merging.py)."""
        ...

    async def documents(
        self, tenant: str, filter_expr: str, after: str | None, limit: int, groups: tuple[str, ...] = ()
    ) -> DocumentPage:
        """A page of the documents `groups` may read in the tenant, after the cursor `after` (a chunk id)."""
        ...

    async def index_version(self) -> int:
        """Bumped by every ingest that changed content: part of every cache key."""
        ...


class Reranker(Protocol):
    async def rerank(self, query: str, passages: list[Passage], top_n: int) -> Reranked:
        """The top_n passages in the reranked order, whether the cross-encoder ran, and its best scores."""
        ...


class Synthesizer(Protocol):
    def synthesize_stream(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None = None,
        mode: ResponseMode = "compact",
    ) -> AsyncIterator[SynthesisItem]:
        """Text deltas as they are generated, then the checked `Synthesis`."""
        ...


@dataclass(frozen=True)
class Stages:
    rewriter: Rewriter
    retriever: Retriever
    reranker: Reranker
    synthesizer: Synthesizer
