"""`ragc bench rerank --dataset DIR`: what Serve's batching costs the cross-encoder, in one run.

The same (question, passage) pairs scored two ways, one after the other, on the same cores:
* the deployment: one rerank replica holding every core, `clients` concurrent requests of `depth` pairs
  each (as the ingress sends them; `serve.batch` merges what arrives together into one forward pass);
* the baseline: the same `CrossEncoderScorer` in this process, all pairs in one `predict` call, measured
  while Ray and Serve run idle beside it (their background processes take CPU from it too).
Printed: pairs/s of each and deployment / baseline (the target is >= 0.9)."""

from __future__ import annotations

import asyncio
import json
import time
from itertools import islice
from pathlib import Path
from typing import Any

from cluster.config import DeploymentConfig, RagcConfig
from cluster.models import available_cpus
from evals.beir import iter_corpus, load_queries
from serve.stages.rerank import CrossEncoderScorer, RerankStage, rerank_pairs
from serve.types import Passage

ROUNDS = 3  # requests per client


def rerank_requests(dataset: Path, count: int, depth: int) -> list[tuple[str, list[Passage]]]:
    """`count` questions, each with `depth` passages (a window sliding over the corpus)."""
    docs = list(islice(iter_corpus(dataset), count + depth))
    passages = [
        Passage(str(d["_id"]), str(d["_id"]), "bench", str(d.get("text", "")), title=str(d.get("title", "")))
        for d in docs
    ]
    questions = list(load_queries(dataset).values())[:count]
    return [(q, passages[n : n + depth]) for n, q in enumerate(questions)]


async def through_deployment(handle: Any, requests: list[tuple[str, list[Passage]]], clients: int) -> float:
    async def client(mine: list[tuple[str, list[Passage]]]) -> None:
        for question, passages in mine:
            await handle.rerank.remote(question, passages, len(passages))

    started = time.perf_counter()
    await asyncio.gather(*(client(requests[n::clients]) for n in range(clients)))
    return time.perf_counter() - started


def bench_rerank(cfg: RagcConfig, dataset: Path, clients: int) -> int:
    import ray
    from ray import serve

    from cluster.ray_runtime import ensure_ray
    from serve.app import deployment_options

    rerank = cfg.serve.rerank.model_copy(update={"timeout_s": 600.0})
    if rerank.model is None:
        rerank.model = cfg.embedding.model  # the same weights both ways: a cost model, not quality
    requests = rerank_requests(dataset, clients * ROUNDS, rerank.depth)
    pairs = [pair for question, passages in requests for pair in rerank_pairs(question, passages)]
    one = DeploymentConfig(min_replicas=1, max_replicas=1, max_ongoing_requests=max(16, clients))

    ensure_ray(cfg)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    app = serve.deployment(**deployment_options("rerank", one))(RerankStage).bind(cfg=rerank, deployment=one)
    handle = serve.run(app, name="bench_rerank", route_prefix=None)
    warm = requests[:clients]
    asyncio.run(through_deployment(handle, warm, clients))
    deployed_s = asyncio.run(through_deployment(handle, requests, clients))
    serve.delete("bench_rerank")

    scorer = CrossEncoderScorer(rerank, threads=available_cpus())
    scorer.score(pairs[:64])
    started = time.perf_counter()
    scorer.score(pairs)
    baseline_s = time.perf_counter() - started
    serve.shutdown()
    ray.shutdown()

    deployed, baseline = len(pairs) / deployed_s, len(pairs) / baseline_s
    print(
        json.dumps(
            {
                "pairs": len(pairs),
                "clients": clients,
                "depth": rerank.depth,
                "batch_max_size": rerank.batch_max_size,
                "deployment_pairs_per_s": round(deployed, 2),
                "in_process_pairs_per_s": round(baseline, 2),
                "ratio_deployment_over_in_process": round(deployed / baseline, 3),
            }
        )
    )
    return 0
