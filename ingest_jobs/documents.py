"""The data contract of the ingestion job: a source document, its chunks, and what went wrong."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from cluster.hashing import sha
from cluster.tenancy import check_tenant

__all__ = ["Failure", "ParsedDocument", "SourceDocument", "check_tenant", "chunk_id", "sha"]


@dataclass(frozen=True)
class SourceDocument:
    """One document found in a source; `text` is set for records that arrive already parsed (jsonl)."""

    doc_id: str
    source: str
    doc_type: str
    content_hash: str
    title: str = ""
    updated_at: int = 0
    year: int = 0
    author: str = ""
    tags: list[str] = field(default_factory=list)
    access: list[str] = field(default_factory=list)
    path: str = ""
    text: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> SourceDocument:
        return cls(**json.loads(raw))


TAG_SEPARATOR = "\x1f"  # a row's labels in one string (a control character, which no label holds)


class ParsedDocument(NamedTuple):
    """What parsing a document yields: its title, year, author, tags and access groups (declared metadata
    first) and its text."""

    title: str
    text: str
    year: int
    author: str = ""
    tags: tuple[str, ...] = ()
    access: tuple[str, ...] = ()


@dataclass(frozen=True)
class Failure:
    doc_id: str
    reason: str


def chunk_id(tenant: str, doc_id: str, text: str, occurrence: int) -> str:
    """Deterministic and content-derived: the same text of the same document keeps its id across runs,
    so unchanged chunks of an edited document keep their vectors."""
    return sha(f"{tenant}\x00{doc_id}\x00{sha(text)}\x00{occurrence}")
