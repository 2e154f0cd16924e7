"""`ragc bench embed --dataset DIR`: what each packaged dense model costs, in one run on the same cores.

Each model embeds the same passages (ingest: one pass per text on a CPU, as the ingest actors do) and the same
questions one at a time (what a query costs the retrieve replica), with the configured precision and threads.
Printed: passages/s, the median and p95 of one question, and each figure as a ratio to the first model (the
default, all-MiniLM-L6-v2)."""

from __future__ import annotations

import json
import statistics
import time
from itertools import islice
from pathlib import Path
from typing import Any

from cluster.config import EmbeddingConfig, RagcConfig
from cluster.config.base import DEFAULT_EMBEDDING_MODEL
from cluster.models import SentenceTransformerEmbedder
from evals.beir import iter_corpus, load_queries

MODELS = (DEFAULT_EMBEDDING_MODEL, "packaged:all-mpnet-base-v2")
QUESTIONS = 50


def measure(embedding: EmbeddingConfig, passages: list[str], questions: list[str]) -> dict[str, Any]:
    embedder = SentenceTransformerEmbedder(embedding)
    embedder.embed(passages[:2] + questions[:2])  # first-call setup is not what a steady job pays
    started = time.perf_counter()
    embedder.embed(passages)
    passages_per_s = len(passages) / (time.perf_counter() - started)
    one_ms = []
    for question in questions:
        started = time.perf_counter()
        embedder.embed([question])
        one_ms.append((time.perf_counter() - started) * 1000)
    return {
        "model": embedding.model_id,
        "dim": embedding.dim,
        "passages_per_s": round(passages_per_s, 2),
        "question_ms_p50": round(statistics.median(one_ms), 2),
        "question_ms_p95": round(statistics.quantiles(one_ms, n=20)[-1], 2),
    }


def bench_embed(cfg: RagcConfig, dataset: Path, limit: int) -> int:
    docs = list(islice(iter_corpus(dataset), limit or 200))
    passages = [f"{d.get('title', '')}. {d.get('text', '')}" for d in docs]
    questions = list(load_queries(dataset).values())[:QUESTIONS]
    rows = []
    for model in MODELS:
        embedding = EmbeddingConfig.model_validate(cfg.embedding.model_dump(exclude={"model", "model_id", "dim"}))
        embedding.model = model
        rows.append(measure(embedding, passages, questions))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    for row in rows:
        row["passages_per_s_ratio"] = round(row["passages_per_s"] / base["passages_per_s"], 3)
        row["question_ms_ratio"] = round(row["question_ms_p50"] / base["question_ms_p50"], 3)
    print(json.dumps({"passages": len(passages), "questions": len(questions), "models": rows}))
    return 0
