"""Rank fusion shared by retrieval (dense + BM25 arms) and rerank (cross-encoder rank + retrieval rank)."""

from __future__ import annotations


def rrf_fuse(ranked_lists: list[list[str]], k: int, weights: list[float] | None = None) -> dict[str, float]:
    """Reciprocal rank fusion: each id scores sum(weight / (k + rank)) over the lists it is in (rank from 1;
    every weight 1 unless given)."""
    scores: dict[str, float] = {}
    for n, ranked in enumerate(ranked_lists):
        weight = 1.0 if weights is None else weights[n]
        for rank, chunk_id in enumerate(ranked, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    return scores
