"""`ragc bench access --dataset DIR [--limit N]`: what the access clause costs a search, in one run.

Every question the service answers is searched with its key's access clause. Over one collection and the same
questions, both retrieval arms are searched (`HybridRetriever.search_arms`, what the retrieve stage runs)
with: no clause (the baseline), the clause on the groups' terms (what the service sends since `access_terms`
was stored), the clause on the `access` ARRAY (what it sends to a collection created before), and a tag
filter on the tags' terms and on the `tags` ARRAY. Printed: each one's p50 and its ratio to the baseline's, in
interleaved rounds so that a drift of the machine reaches every variant alike, and the hits both arms returned
(a filter that matches fewer chunks also has fewer to return: on a corpus without tags the tag filter's hits
are 0)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.ingest import write_subset
from bench.query import BENCH_SOURCE, BENCH_TENANT, load_questions
from cluster.config import RagcConfig
from cluster.labels import PUBLIC
from cluster.store.expr import holds_any_label, quote
from cluster.store.schema import ChunkFields
from ingest_jobs.sync import run_sync
from local.cluster import sidecars_running
from serve.edge.filters import compile_filters, on_label_terms
from serve.stages.retrieve import HybridRetriever

ROUNDS = 3
KEY_GROUPS = ("hr", "ops", "finance")  # a key with three groups: a clause of four alternatives


def clauses(cfg: RagcConfig | None = None) -> dict[str, str]:
    cfg = cfg or RagcConfig()
    readers = (PUBLIC, *KEY_GROUPS)
    tagged = compile_filters({"tags": KEY_GROUPS[0]}, cfg.serve.filters, cfg.serve.limits)
    return {
        "none (baseline)": "",
        "terms, key without groups": holds_any_label(ChunkFields.ACCESS_TERMS, (PUBLIC,)),
        "terms, key with 3 groups": holds_any_label(ChunkFields.ACCESS_TERMS, readers),
        "array, key without groups": f"array_contains_any({ChunkFields.ACCESS}, [{quote(PUBLIC)}])",
        "array, key with 3 groups": f"array_contains_any({ChunkFields.ACCESS}, [{', '.join(map(quote, readers))}])",
        "tag filter, terms": on_label_terms(tagged, {ChunkFields.TAGS: ChunkFields.TAGS_TERMS}),
        "tag filter, array": tagged,
    }


def bench_access(cfg: RagcConfig, dataset: Path, limit: int, questions_n: int) -> int:
    cfg = cfg.model_copy(deep=True)
    cfg.milvus.collection = "ragc_bench_access"
    questions = load_questions(dataset, questions_n)
    variants = clauses(cfg)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    hits: dict[str, list[int]] = {name: [] for name in variants}  # a clause that matches less returns less
    with sidecars_running(cfg):
        with tempfile.TemporaryDirectory() as tmp:
            subset = write_subset(dataset, limit, Path(tmp))  # one named source: a rerun replaces, never adds
            ingest = run_sync(cfg, subset, BENCH_TENANT, prune=True, source_name=BENCH_SOURCE)
        retriever = HybridRetriever(cfg)
        for question in questions:  # warm: the query vectors come from the embedding cache from here on
            retriever.search_arms(BENCH_TENANT, question)
        for _ in range(ROUNDS):
            for name, clause in variants.items():
                for question in questions:
                    started = time.perf_counter()
                    found = retriever.search_arms(BENCH_TENANT, question, clause)
                    seconds[name].append(time.perf_counter() - started)
                    hits[name].append(sum(len(arm) for arm in found.results.values()))
    p50 = {name: float(np.median(times)) * 1000 for name, times in seconds.items()}
    baseline = p50["none (baseline)"]
    chunks = ingest.summary()["chunks_total"]
    mean_hits = {name: float(np.mean(found)) for name, found in hits.items()}
    for name, ms in p50.items():
        print(f"{name:28s} p50 {ms:8.1f} ms  x{ms / baseline:6.2f} the baseline's  {mean_hits[name]:5.1f} hits")
    report = {
        "bench": "access",
        "chunks": chunks,
        "questions": len(questions),
        "rounds": ROUNDS,
        "p50_ms": {name: round(ms, 2) for name, ms in p50.items()},
        "ratio_to_no_clause": {name: round(ms / baseline, 3) for name, ms in p50.items()},
        "mean_hits": {name: round(n, 1) for name, n in mean_hits.items()},
    }
    print(json.dumps(report))
    return 0
