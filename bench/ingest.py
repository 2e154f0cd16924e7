"""`ragc bench ingest --dataset DIR`: the Ray Data job against plain `SentenceTransformer.encode`.

Prints, from one run: Ray job chunks/s / plain encode chunks/s over the same chunks (baseline: encode in
this process, model already loaded), no-change re-run time / full run time, and peak memory."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench.memory import MB, PeakMemory
from cluster.config import RagcConfig
from cluster.models import SentenceTransformerEmbedder
from cluster.ray_runtime import ensure_ray
from cluster.store.client import connect
from cluster.store.collections import Collections
from ingest_jobs.chunking import Chunker, model_tokenizer
from ingest_jobs.loaders import parse, scan
from ingest_jobs.sync import run_sync

BENCH_TENANT = "bench"


def write_subset(dataset: Path, limit: int, out: Path) -> Path:
    lines: list[str] = []
    for part in sorted(dataset.glob("corpus*.jsonl")):
        with part.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    lines.append(line.rstrip("\n"))
                if limit and len(lines) >= limit:
                    break
        if limit and len(lines) >= limit:
            break
    if not lines:
        raise FileNotFoundError(f"no corpus*.jsonl lines under {dataset}")
    target = out / "corpus.jsonl"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def bench_ingest(cfg: RagcConfig, dataset: Path, limit: int) -> int:
    cfg = cfg.model_copy(deep=True)
    cfg.milvus.collection = "ragc_bench_ingest"
    cfg.redis.enabled = False  # a warm shared embedding cache would make the job look faster than it is
    client = connect(cfg)
    collections = Collections(client, cfg)
    for name in collections.generations():
        collections.drop_physical(name)

    with tempfile.TemporaryDirectory() as tmp:
        source = write_subset(dataset, limit, Path(tmp))
        started = time.perf_counter()
        ensure_ray(cfg)
        ray_start_s = time.perf_counter() - started
        with PeakMemory() as peak:
            full = run_sync(cfg, source, BENCH_TENANT)
        rerun = run_sync(cfg, source, BENCH_TENANT)

        docs = scan(source, cfg.ingest.max_file_bytes).documents
        chunker = Chunker(cfg.chunking, model_tokenizer(cfg.embedding.model))
        texts = [c.text for d in docs for c in chunker.chunk(d, BENCH_TENANT, parse(d))]
        embedder = SentenceTransformerEmbedder(cfg.embedding)
        embedder.embed(texts[: cfg.embedding.batch_size])  # warm-up, as the Ray actor's first batch is
        base_started = time.perf_counter()
        embedder.embed(texts)
        base_s = time.perf_counter() - base_started

    job_rate = full.chunks_upserted / full.seconds
    base_rate = len(texts) / base_s
    result = {
        "bench": "ingest",
        "documents": len(docs),
        "chunks": full.chunks_upserted,
        "baseline_chunks": len(texts),
        "ray_start_s": round(ray_start_s, 2),
        "job_s": round(full.seconds, 2),
        "job_chunks_per_s": round(job_rate, 2),
        "encode_chunks_per_s": round(base_rate, 2),
        "ratio_job_vs_encode": round(job_rate / base_rate, 3),
        "rerun_s": round(rerun.seconds, 3),
        "rerun_chunks_embedded": rerun.chunks_embedded,
        "ratio_rerun_vs_full": round(rerun.seconds / full.seconds, 4),
        "peak_rss_mb": round(peak.peak_bytes / MB),
    }
    print(
        f"Ray Data job: {job_rate:.1f} chunks/s over {full.chunks_upserted} chunks ({full.seconds:.1f}s, "
        f"Ray start {ray_start_s:.1f}s not included)"
    )
    print(
        f"baseline SentenceTransformer.encode: {base_rate:.1f} chunks/s -> ratio {job_rate / base_rate:.3f} "
        "(target >= 0.85)"
    )
    print(
        f"no-change re-run: {rerun.seconds:.3f}s / {full.seconds:.1f}s = {rerun.seconds / full.seconds:.4f} "
        "(target <= 0.05)"
    )
    print(f"peak RSS of the job's processes (driver, Ray, milvus-lite): {peak.peak_bytes / MB:.0f} MB")
    print(json.dumps(result))
    for name in collections.generations():
        collections.drop_physical(name)
    return 0
