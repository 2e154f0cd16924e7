"""`ragc bench`: performance harnesses that print ratios against baselines measured in the same run."""

from __future__ import annotations

import argparse
import os

from cluster.config import RagcConfig


def run_bench(cfg: RagcConfig, args: argparse.Namespace) -> int:
    if args.target == "ingest":
        from bench.ingest import bench_ingest

        return bench_ingest(cfg, args.dataset, args.limit)
    if args.target == "query":
        from bench.query import bench_query

        return bench_query(cfg, args.dataset, args.limit, args.clients or 16, args.duration)
    if args.target == "cache":
        from bench.cache import bench_cache

        return bench_cache(cfg, args.dataset, args.limit, args.questions)
    if args.target == "llm":
        from bench.llm import bench_llm

        return bench_llm(cfg, args.dataset, args.limit)
    if args.target == "tracing":
        from bench.tracing import bench_tracing

        return bench_tracing(cfg, args.dataset, args.limit, args.clients or 16, args.duration)
    if args.target == "embed":
        from bench.dense_models import bench_embed

        return bench_embed(cfg, args.dataset, args.limit)
    if args.target == "rerank":
        from bench.rerank_batching import bench_rerank

        return bench_rerank(cfg, args.dataset, args.clients or 8)
    if args.target == "prefix":
        from bench.prefix import bench_prefix

        return bench_prefix(cfg, args.dataset)
    if args.target == "access":
        from bench.access_filter import bench_access

        return bench_access(cfg, args.dataset, args.limit, args.questions)
    if args.target == "profile":
        from bench.profile import bench_profile
        from local.cluster import http_url

        return bench_profile(
            args.url or http_url(cfg),
            args.dataset,
            [v.strip() for v in args.variants.split(",") if v.strip()],
            [int(n) for n in args.concurrency.split(",")],
            args.point_s,
            args.output or cfg.state_dir / "bench" / "profile",
            os.environ.get("RAGC_API_KEY"),
        )
    raise ValueError(f"unknown bench target {args.target!r}")
