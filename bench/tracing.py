"""`ragc bench tracing --dataset DIR`: the cost of traces. The same app (no LLM, no cache, no rerank: the
part of the path where tracing's share is largest) on the same corpus and questions, loaded by the same
closed loop, first with tracing off, then on with every span exported to a local OTLP receiver. Printed:
each run's QPS and p50/p95, the on/off ratios, and the spans received."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.ingest import write_subset
from bench.query import BENCH_TENANT, WARM_UP_S, bench_config, closed_loop, load_questions, start_app
from cluster.config import RagcConfig
from ingest_jobs.sync import run_sync
from local.otlp import OtlpReceiver
from serve.tracing import tracing_env


def bench_tracing(cfg: RagcConfig, dataset: Path, limit: int, clients: int, duration_s: float) -> int:
    import ray
    from ray import serve

    cfg = bench_config(cfg)
    cfg.serve.rerank.model = None
    questions = load_questions(dataset, 200)
    receiver = OtlpReceiver()
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.endpoint
    runs: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ingest = run_sync(cfg, write_subset(dataset, limit, Path(tmp)), BENCH_TENANT)
            for traced in (False, True):
                ray.shutdown()  # Serve's proxy reads its tracing settings from the environment Ray starts with
                cfg.serve.traces.enabled = traced
                env = tracing_env(cfg.serve.traces)
                for key in tracing_env(cfg.serve.traces.model_copy(update={"enabled": True})):
                    os.environ.pop(key, None)
                os.environ.update(env)
                name = "traced" if traced else "untraced"
                url = start_app(cfg, name)
                result = asyncio.run(closed_loop(url, questions, clients, duration_s, name, WARM_UP_S))
                runs["on" if traced else "off"] = result.summary()
                serve.shutdown()
    finally:
        ray.shutdown()
        receiver.close()
    off, on = runs["off"], runs["on"]
    print(
        json.dumps(
            {
                "bench": "tracing",
                "chunks": ingest.chunks_total,
                "clients": clients,
                "off": off,
                "on": on,
                "p50_ratio_on_over_off": round(on["p50_ms"] / off["p50_ms"], 3),
                "p95_ratio_on_over_off": round(on["p95_ms"] / off["p95_ms"], 3),
                "qps_ratio_on_over_off": round(on["qps"] / off["qps"], 3),
                "spans_received": len(receiver.spans),
            }
        )
    )
    return 0
