"""The data contract between query stages: one `Passage` type, per-stage reports, the API models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StageStatusName = Literal[
    "ok", "fallback", "skipped", "cached", "error", "hit_l1", "hit_l2", "hit_semantic", "miss", "bypass", "off"
]


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
    score: float = 0.0
    dense_score: float | None = None
    rerank_score: float | None = None

    def public(self, n: int) -> dict[str, Any]:
        return {
            "n": n,
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "source": self.source,
            "section": self.section,
            "text": self.text,
            "score": round(self.score, 6),
            "dense_score": None if self.dense_score is None else round(self.dense_score, 6),
        }


@dataclass
class StageReport:
    status: StageStatusName
    ms: float = 0.0
    detail: str = ""

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "ms": round(self.ms, 2)}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass
class RetrievalResult:
    passages: list[Passage]
    index_version: int
    arms: dict[str, str] = field(default_factory=dict)  # arm -> "ok" | error reason
    dropped_below_floor: int = 0
    embedded: str = "query"  # what the dense arm embedded: query, query+hyde or hyde

    @property
    def degraded(self) -> bool:
        return any(v != "ok" for v in self.arms.values())


@dataclass
class RewriteResult:
    query: str
    hyde_passage: str | None = None
    status: StageStatusName = "skipped"
    detail: str = ""


@dataclass
class Synthesis:
    answer: str
    cited: list[int]
    grounded: bool
    mode: str
    removed_citations: int = 0


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
    stream: bool = False


class StageStatus(BaseModel):
    status: StageStatusName
    ms: float
    detail: str | None = None


class Citation(BaseModel):
    n: int
    chunk_id: str
    doc_id: str
    title: str
    source: str
    score: float


class RetrievalQuery(BaseModel):
    query: str = Field(description="what was searched: the question, or its rewrite")
    hyde_passage: str | None = Field(default=None, description="the hypothetical passage embedded with it")


class QueryResponse(BaseModel):
    answer: str
    citations: list[Citation]
    passages: list[dict[str, Any]]
    abstained: bool
    grounded: bool
    stages: dict[str, StageStatus]
    index_version: int
    request_id: str
    tenant: str
    retrieval_query: RetrievalQuery
