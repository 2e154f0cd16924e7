"""Standard BEIR metrics (graded nDCG@10, Recall@100, MRR@10, hit rate@10) through `pytrec_eval`.

A query the pipeline returned nothing for (it abstained) scores 0 on every metric: pytrec_eval would
silently leave it out of the mean."""

from __future__ import annotations

from statistics import fmean

import pytrec_eval

from evals.beir import Qrels

Ranking = list[str]  # doc ids, best first, no duplicates
TREC_MEASURES = {"ndcg_cut.10", "recall.100", "recip_rank", "success.10"}
METRICS = ("ndcg@10", "recall@100", "mrr@10", "hit_rate@10")


def as_run(rankings: dict[str, Ranking], depth: int) -> dict[str, dict[str, float]]:
    """Scores that reproduce our order exactly (trec_eval sorts by score, then by doc id)."""
    return {qid: {doc: float(depth - rank) for rank, doc in enumerate(docs[:depth])} for qid, docs in rankings.items()}


def per_query(rankings: dict[str, Ranking], qrels: Qrels) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES)
    full = evaluator.evaluate({q: r for q, r in as_run(rankings, 100).items() if r})
    top10 = evaluator.evaluate({q: r for q, r in as_run(rankings, 10).items() if r})
    out: dict[str, dict[str, float]] = {}
    for qid in qrels:
        if qid not in full:
            out[qid] = dict.fromkeys(METRICS, 0.0)
            continue
        out[qid] = {
            "ndcg@10": full[qid]["ndcg_cut_10"],
            "recall@100": full[qid]["recall_100"],
            "mrr@10": top10[qid]["recip_rank"],
            "hit_rate@10": full[qid]["success_10"],
        }
    return out


def mean_metrics(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    return {m: round(fmean(s[m] for s in scores.values()), 4) for m in METRICS}
