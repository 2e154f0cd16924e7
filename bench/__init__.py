"""`ragc bench`: performance harnesses that print ratios against baselines measured in the same run."""

from __future__ import annotations

import argparse

from cluster.config import RagcConfig


def run_bench(cfg: RagcConfig, args: argparse.Namespace) -> int:
    if args.target == "ingest":
        from bench.ingest import bench_ingest

        return bench_ingest(cfg, args.dataset, args.limit)
    if args.target == "query":
        from bench.query import bench_query

        return bench_query(cfg, args.dataset, args.limit, args.clients, args.duration)
    if args.target == "cache":
        from bench.cache import bench_cache

        return bench_cache(cfg, args.dataset, args.limit, args.questions)
    if args.target == "llm":
        from bench.llm import bench_llm

        return bench_llm(cfg, args.dataset, args.limit)
    if args.target == "tracing":
        from bench.tracing import bench_tracing

        return bench_tracing(cfg, args.dataset, args.limit, args.clients, args.duration)
    raise ValueError(f"unknown bench target {args.target!r}")
