"""Rank fusion shared by retrieval (dense + BM25 arms) and rerank (cross-encoder rank + retrieval rank)."""

from __future__ import annotations


def rrf_fuse(ranked_lists: list[list[str]], k: int) -> dict[str, float]:
    """Reciprocal rank fusion: each id scores sum(1 / (k + rank)) over the lists it is in (rank from 1)."""
    scores: dict[str, float] = {}
    for ranked in ranked_lists:
        for rank, chunk_id in enumerate(ranked, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return scores
