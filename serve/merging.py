"""Auto-merging: when `min_siblings` or more of the passages come from one section of one document, the
answer reads that section whole in place of them, as LlamaIndex's AutoMergingRetriever swaps the child nodes
it retrieved for their parent. The first of the siblings keeps its rank and carries the section as its
context; the others leave the list (their text is in the section), so the answer's `[n]` still counts the
passages returned and a citation still points at a chunk that was retrieved.

A section is `(doc_id, section)`: the chunker's heading path (`Guide / Tenants`), or the whole document when
it has no headings. A section longer than `max_chars` is read from its first to its last retrieved sibling
instead; if that span is longer still, or a chunk in it is missing, the siblings stay as they were."""

from __future__ import annotations

from functools import reduce
from typing import Any

from cluster.store.expr import all_of, eq
from cluster.store.schema import ChunkFields
from serve.neighbours import stitch
from serve.types import Merged, Passage

SectionKey = tuple[str, str]  # (doc_id, section)


def sibling_groups(passages: list[Passage], min_siblings: int) -> dict[SectionKey, list[Passage]]:
    """The sections that `min_siblings` or more of the passages come from, each with its passages in order."""
    groups: dict[SectionKey, list[Passage]] = {}
    for p in passages:
        groups.setdefault((p.doc_id, p.section), []).append(p)
    return {key: found for key, found in groups.items() if len(found) >= max(min_siblings, 2)}


def section_expr(tenant: str, sections: list[SectionKey]) -> str:
    """One filter for every chunk of the given sections, in the tenant."""
    f = ChunkFields
    per_section = [all_of(eq(f.DOC_ID, doc), eq(f.SECTION, section)) for doc, section in sections]
    return all_of(eq(f.TENANT, tenant), " or ".join(f"({clause})" for clause in per_section))


def section_text(parts: dict[int, str], siblings: list[Passage], max_chars: int) -> str | None:
    """The section's chunks in order, their shared overlaps kept once; if longer than `max_chars`, the span
    from the first to the last sibling; None when that too is longer or a chunk in the span is missing."""
    if not parts:
        return None
    indexes = [p.chunk_index for p in siblings]
    for start, end in ((min(parts), max(parts)), (min(indexes), max(indexes))):
        span = [parts.get(i) for i in range(start, end + 1)]
        if any(text is None for text in span):
            continue
        text = reduce(stitch, [t for t in span if t is not None])
        if len(text) <= max_chars:
            return text
    return None


def merge(passages: list[Passage], chunks: list[dict[str, Any]], min_siblings: int, max_chars: int) -> Merged:
    """`chunks`: rows of `section_expr`'s query (doc_id, section, chunk_index, text)."""
    f = ChunkFields
    by_section: dict[SectionKey, dict[int, str]] = {}
    for c in chunks:
        by_section.setdefault((str(c[f.DOC_ID]), str(c[f.SECTION])), {})[int(c[f.CHUNK_INDEX])] = str(c[f.TEXT])
    contexts: dict[str, str] = {}
    folded: set[str] = set()
    for key, siblings in sibling_groups(passages, min_siblings).items():
        text = section_text(by_section.get(key, {}), siblings, max_chars)
        if text is not None:
            contexts[siblings[0].chunk_id] = text
            folded.update(p.chunk_id for p in siblings[1:])
    return Merged([p for p in passages if p.chunk_id not in folded], contexts, len(folded))
