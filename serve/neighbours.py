"""Neighbour expansion: the answer stage reads each passage with up to `window` chunks of the same document
on each side (`chunk_index ± window`), fetched in one Milvus query for all passages. The citation still
points at the passage that was retrieved; only what the answer is drawn from widens.

A neighbour that is itself one of the passages is not repeated in another's window (it is in the prompt as
its own passage), and a window stops at the first chunk it cannot use, so each stays one contiguous text.
Neighbouring chunks share `chunk_overlap` tokens; the shared text is kept once."""

from __future__ import annotations

from typing import Any

from cluster.store.expr import all_of, eq
from cluster.store.schema import ChunkFields
from serve.types import Passage

MIN_SHARED_CHARS = 16  # a shorter common edge is a coincidence, not the chunker's overlap


def window_expr(tenant: str, passages: list[Passage], window: int) -> str:
    """One filter for every passage's neighbours: per document, the chunk index ranges around its passages."""
    f = ChunkFields
    ranges: dict[str, set[int]] = {}
    for p in passages:
        ranges.setdefault(p.doc_id, set()).update(range(max(0, p.chunk_index - window), p.chunk_index + window + 1))
    per_doc = [
        all_of(eq(f.DOC_ID, doc), f"{f.CHUNK_INDEX} in [{', '.join(str(i) for i in sorted(indexes))}]")
        for doc, indexes in ranges.items()
    ]
    return all_of(eq(f.TENANT, tenant), " or ".join(f"({clause})" for clause in per_doc))


def stitch(left: str, right: str) -> str:
    """`left` then `right`, the text they share at the seam kept once."""
    for size in range(min(len(left), len(right)), MIN_SHARED_CHARS - 1, -1):
        if left.endswith(right[:size]):
            return left + right[size:]
    return f"{left} {right}"


def widen(passages: list[Passage], chunks: list[dict[str, Any]], window: int) -> dict[str, str]:
    """chunk_id -> the passage's text with its neighbours, for each passage that gained any."""
    f = ChunkFields
    by_position = {(str(c[f.DOC_ID]), int(c[f.CHUNK_INDEX])): str(c[f.TEXT]) for c in chunks}
    taken = {(p.doc_id, p.chunk_index) for p in passages}
    out: dict[str, str] = {}
    for p in passages:
        text = p.text
        for step in (-1, 1):
            for offset in range(1, window + 1):
                position = (p.doc_id, p.chunk_index + step * offset)
                neighbour = by_position.get(position)
                if neighbour is None or position in taken:
                    break
                text = stitch(neighbour, text) if step < 0 else stitch(text, neighbour)
        if text != p.text:
            out[p.chunk_id] = text
    return out
