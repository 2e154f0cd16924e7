"""`ragc bench cache --dataset DIR`: what the response cache saves, measured in one run.

Cold: each question once on an empty cache. Warm: the same questions again (exact hits). Ratio =
warm p50 / cold p50. Semantic: paraphrases built from the labelled questions ("Is it true that ...?",
"... - what does the evidence say?") asked after the originals; printed is the share answered by L3."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import numpy as np

from bench.ingest import write_subset
from bench.query import BENCH_TENANT, bench_config, load_questions, start_app
from cluster.config import RagcConfig
from ingest_jobs.sync import run_sync

PARAPHRASES = ("Is it true that {q}?", "{q} - what does the evidence say?")


def paraphrase(question: str, n: int) -> str:
    return PARAPHRASES[n % len(PARAPHRASES)].format(q=question.rstrip(".?! "))


def timed_ask(client: httpx.Client, url: str, question: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = client.post(url, json={"query": question})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, str(response.json()["stages"]["cache"]["status"])


def bench_cache(cfg: RagcConfig, dataset: Path, limit: int, questions_n: int) -> int:
    import tempfile

    from ray import serve

    cfg = bench_config(cfg)
    cfg.serve.cache.enabled = True
    questions = load_questions(dataset, questions_n)
    with tempfile.TemporaryDirectory() as tmp:
        run_sync(cfg, write_subset(dataset, limit, Path(tmp)), BENCH_TENANT)
    url = start_app(cfg, "bench-cache")
    with httpx.Client(timeout=120) as client:
        timed_ask(client, url, "warm-up question about the corpus")
        cold = [timed_ask(client, url, q) for q in questions]
        warm = [timed_ask(client, url, q) for q in questions]
        para = [timed_ask(client, url, paraphrase(q, n)) for n, q in enumerate(questions)]
    serve.delete("bench-cache")
    cold_p50 = float(np.median([t for t, _ in cold]))
    warm_p50 = float(np.median([t for t, _ in warm]))
    levels = {s: sum(1 for _, st in warm if st == s) for s in {st for _, st in warm}}
    semantic = sum(1 for _, st in para if st == "hit_semantic") / len(para)
    report = {
        "bench": "cache",
        "questions": len(questions),
        "cold_statuses": sorted({s for _, s in cold}),
        "cold_p50_ms": round(cold_p50 * 1000, 2),
        "warm_p50_ms": round(warm_p50 * 1000, 2),
        "ratio_warm_vs_cold_p50": round(warm_p50 / cold_p50, 4),
        "warm_levels": levels,
        "semantic_hit_rate": round(semantic, 3),
        "semantic_threshold": cfg.serve.cache.semantic_threshold,
    }
    print(
        f"cold p50 {cold_p50 * 1000:.1f} ms, warm (exact hit) p50 {warm_p50 * 1000:.2f} ms -> ratio "
        f"{warm_p50 / cold_p50:.4f} (target <= 0.05); warm levels {levels}"
    )
    print(f"paraphrase semantic hit rate {semantic:.3f} at cosine >= {cfg.serve.cache.semantic_threshold}")
    print(json.dumps(report))
    return 0
